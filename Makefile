# eventhub: PGXS build of the server extension, the client library and CLI
# (client/), and the test and demo drivers.  `make test` and `make demo` install what they need first, so they
# must work before PostgreSQL's server headers are on the machine; the PGXS
# include below is therefore conditional.

EXTENSION = eventhub
EXTVERSION = $(shell sed -n "s/^default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" $(EXTENSION).control)

MODULE_big = eventhub
OBJS = \
	extension/access.o \
	extension/common.o \
	extension/eventhub.o \
	extension/guard.o \
	extension/heartbeat_args.o \
	extension/metrics.o \
	extension/metrics_report.o \
	extension/notifier.o \
	extension/notify.o \
	extension/notify_key.o \
	extension/notify_queue.o \
	extension/publish.o \
	extension/read.o \
	extension/replicas.o \
	extension/retention.o \
	extension/snapshot.o \
	extension/standby_waker.o \
	extension/statement_list.o \
	extension/statements.o \
	extension/statements_retention.o \
	extension/wait.o \
	extension/waiters.o \
	extension/worker.o

DATA = $(wildcard sql/$(EXTENSION)--*--*.sql)
DATA_built = sql/$(EXTENSION)--$(EXTVERSION).sql

SHLIB_LINK += -luuid -lcrypto
# -Wno-unused-parameter: PostgreSQL's own headers trip -Wextra's check.
PG_CFLAGS += -Wall -Wextra -Werror -Wmissing-prototypes -Wno-unused-parameter
# The version of the SQL objects the library serves: the control file's.
PG_CPPFLAGS += -DEVENTHUB_EXTVERSION='"$(EXTVERSION)"'

# The current version's install script is built from sql/eventhub.sql; of
# the earlier releases only the first keeps one: PostgreSQL reaches any
# other (CREATE EXTENSION eventhub VERSION '0.3.0') from it through the
# update scripts.
DATA += sql/$(EXTENSION)--0.1.0.sql

# `make installcheck` runs the SQL and isolation suites against a server you
# already run (PGHOST/PGPORT); `make test` runs everything on a throwaway one.
REGRESS = $(sort $(patsubst regress/sql/%.sql,%,$(wildcard regress/sql/*.sql)))
REGRESS_OPTS = --inputdir=regress
ISOLATION = $(sort $(patsubst regress/specs/%.spec,%,$(wildcard regress/specs/*.spec)))
ISOLATION_OPTS = --inputdir=regress

EXTRA_CLEAN = $(DATA_built) output_iso

# Debian's server for the targeted major version, unless told otherwise.
PG_CONFIG ?= $(firstword $(wildcard /usr/lib/postgresql/15/bin/pg_config) pg_config)
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)

.DEFAULT_GOAL := all
.PHONY: test test-go-long test-under-load demo ha-demo bench deb prove_installcheck
test:
	@scripts/test.sh
# The Go package's differential test, 50 seeded runs (make test runs 3).
test-go-long:
	@SUITES=go EVENTHUB_DIFF_RUNS=50 scripts/test.sh
# make test while stress-ng --cpu 2 --io 1 loads the machine, RUNS times in
# a row (make test-under-load RUNS=3), stopping at the first failure.
test-under-load:
	@RUNS='$(RUNS)' scripts/under-load.sh
# The TAP suites (regress/t) against the installed extension and library:
# each test starts its own clusters.  make installcheck (PGXS, below) runs
# the SQL and isolation suites against a server you run.
prove_installcheck:
	@SUITES=tap EVENTHUB_INSTALLCHECK=1 PROVE_TESTS='$(PROVE_TESTS)' scripts/test.sh
demo:
	@scripts/demo.sh
# eventhub under Patroni: a switchover while a publisher and a watcher run
# through a multi-host conninfo (scripts/ha-cluster.sh makes the cluster).
ha-demo:
	@scripts/ha-demo.sh
# The benchmark (bench/run.sh) on this tree, built and installed; it installs
# no packages (scripts/deps.sh does) and says what is missing.
bench:
	@bench/run.sh --check && $(MAKE) -s && $(MAKE) -s install >/dev/null && bench/run.sh
# The Debian packages, built from a clean copy of this tree into build/deb/.
deb:
	@scripts/deb.sh

ifneq ($(wildcard $(PGXS)),)
include $(PGXS)

$(DATA_built): sql/$(EXTENSION).sql $(EXTENSION).control
	cp $< $@

# The version is compiled in (EVENTHUB_EXTVERSION): rebuild what uses it
# when the control file's default_version changes.
extension/common.o extension/worker.o: $(EXTENSION).control

# The client library and CLI (client/) build and install with the extension,
# unless WITH_CLIENT=no: the Debian packaging builds them once, apart from the
# extension it builds for each PostgreSQL version.
WITH_CLIENT ?= yes
.PHONY: client client-install client-clean
ifeq ($(WITH_CLIENT),yes)
all: client demo/replica
install: client-install
clean: client-clean
endif
client:
	$(MAKE) -C client PG_CONFIG=$(PG_CONFIG)
client-install:
	$(MAKE) -C client PG_CONFIG=$(PG_CONFIG) install
client-clean:
	$(MAKE) -C client clean
	rm -f demo/replica

# The demo's replica program, on the static client library.
demo/replica: demo/replica.c client
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -Iclient $< client/libeventhub.a \
		-L$(shell $(PG_CONFIG) --libdir) -lpq -lcrypto -o $@
else
all install installcheck:
	@echo "PostgreSQL server headers not found (PG_CONFIG=$(PG_CONFIG))." >&2
	@echo "Install postgresql-server-dev-15, or run 'make test', which installs it." >&2
	@exit 1
endif
