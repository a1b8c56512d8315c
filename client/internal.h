/*
 * internal.h: what the files of libeventhub share, and what its unit tests
 * reach; not installed.
 *
 * The library's files are layers, bottom first.  A file calls functions of
 * the files listed before it, never of one after it: the utilities know
 * nothing of connections, the transport nothing of what the client asks,
 * and only settings.c and client.c are the public API.  A file includes
 * only headers of its own layer or below: foo.h is foo.c's, this one
 * util.c's (the files below util.c never see the handle), eventhub.h
 * everyone's.  check_layers.sh proves both, the calls from the object
 * files with nm and the includes from the sources, in `make check`; it
 * reads these lines.  The state each file owns is named beside it (and
 * marked with its owner in struct eh_client below), and other files reach
 * it through the owner's functions, except: the settings and callbacks
 * (cfg, cb), read by every file; the link's fields, which the files above
 * link.c set for the query they send (the keys' fields are keys.c's); the
 * LISTEN state (listen), which keys.c, notifications.c and state_poll.c
 * read; whether waits stand in for the fallback poll (wait.slow_poll),
 * which link.c reads for the poll interval; and a subscription's record (eh_sub), shared by the delivery files
 * from rows.c up (its list is subscriptions.c's alone).
 *
 *	  layer: json.c		 the notification payload, JSON quoting
 *	  layer: sealed.c	 the events a notification carries: opening and
 *						 decoding them (ehi_sealed)
 *	  layer: strbuf.c	 a string builder
 *	  layer: map.c		 a hash map
 *	  layer: versions.c	 the memory of delivered and notified versions
 *	  layer: util.c		 the clock, jitter, the handle's error, the log callback,
 *						 the names of the public enums; the first to see the
 *						 handle (this header is util.c's layer)
 *	  layer: conn.c		 one connection without waiting: connecting, a query,
 *						 its answer, deadlines (the transport)
 *	  layer: link.c		 the client's connection (link): sending a query for
 *						 an operation, losing it, reconnect and error backoffs,
 *						 when the next poll is due
 *	  layer: stats.c	 the client's metrics: what deliveries and snapshots
 *						 record of each subscription (ready, fresh, resyncs),
 *						 and their text exposition
 *	  layer: snapshot_pages.c	a snapshot's transaction and its pages (snap):
 *						 the queries that read it, the snapshot callback, its abort
 *	  layer: rows.c		 handing a fetch's rows to the callbacks, the rest of
 *						 a stopped batch (held); a notification's events as rows
 *	  layer: subscriptions.c	the subscriptions (subs, by_org, by_token,
 *						 fetch_next): adding, removing, tokens, the round robin
 *	  layer: resync.c	 a subscription against its head; resyncs; the head query
 *	  layer: state_poll.c	the poll of the subscriptions' heads and tokens
 *	  layer: discovery.c	eh_subscribe_all() (all): discovery, the tokens of
 *						 the organizations found, unknown tokens
 *	  layer: fetch.c	 fetching events (transactions_since; events_since on
 *						 an old server), the fetch's errors
 *	  layer: keys.c		 data keys and the notifier's pid
 *	  layer: notifications.c	draining notifications; delivering the events
 *						 they carry
 *	  layer: delivery.c	 which delivery query goes next; whose answer is whose
 *	  layer: wait.c		 waiting for events without LISTEN (wait):
 *						 eventhub.wait_for_events(), where LISTEN cannot reach
 *	  layer: registry.c	 the replica registry (replica): heartbeats,
 *						 deregistration
 *	  layer: session.c	 the session (listen, publish): the drive loop, the
 *						 first query, the LISTEN probe, which query goes next,
 *						 dispatching the answers, the publish out, what to
 *						 wait for and how long
 *	  layer: settings.c	 the eh_set_* calls (cfg, cb)
 *	  layer: client.c	 the other public calls of eventhub.h
 */
#ifndef EVENTHUB_INTERNAL_H
#define EVENTHUB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "eventhub.h"

#include "json.h"
#include "sealed.h"
#include "strbuf.h"
#include "map.h"
#include "versions.h"
#include "conn.h"

/* ----------------------------------------------------------- the client */

/* eh_resync_reason's values, 1 to 3, index resync counts; 0 is unused. */
#define EHI_RESYNC_REASONS 4

/* stats.c: what the metrics keep of a subscription. */
typedef struct ehi_sub_stats
{
	int			ready;			/* it applied a snapshot or reached the head once */
	int64_t		fresh_at;		/* monotonic ms: the cursor last confirmed at the head
								 * (when the query that said so was sent); at first,
								 * when it was subscribed */
	uint64_t	resyncs[EHI_RESYNC_REASONS];	/* by eh_resync_reason */
} ehi_sub_stats;

/* stats.c: the subscription "*" (eh_subscribe_all). */
typedef struct ehi_all_stats
{
	int			on;				/* eh_subscribe_all() was called */
	int			discovered;		/* a discovery answered since */
	int64_t		fresh_at;		/* when the last discovery that answered was sent */
	int64_t		unready;		/* automatic subscriptions not ready yet */
	int			ready;			/* once discovered with every one ready; it stays */
} ehi_all_stats;

typedef struct eh_sub
{
	char	   *org;
	int64_t		cursor;			/* last delivered revision; -1: waiting for the head */
	char		version[EH_VERSION_ID_LEN + 1];	/* version_id at the cursor, "" unknown */
	char		token[EH_TOKEN_LEN + 1];	/* its notification token, "" unknown */
	int			needs_fetch;	/* a newer revision is known to exist */
	int			resync_reason;	/* a resync the server asked for: read the head */
	int			wants_snapshot; /* a snapshot is due or under way (snapshot_pages.c) */
	int			snapshot_reason;	/* its reason: 0 initial, else an eh_resync_reason */
	int			no_snapshot;	/* the last snapshot was refused as incomplete (ZE004):
								 * answer this resync with the resync callback */
	int			automatic;		/* added by eh_subscribe_all() */
	ehi_versions seen;			/* recently delivered and notified versions */
	unsigned char data_key[EHI_DATA_KEY_BYTES];	/* what its notifications' events
												 * are sealed under */
	int			has_key;		/* data_key is known (for its current token) */
	int			key_asked;		/* a keys query asked for it (for its current token) */
	int64_t		acked;			/* eh_ack's revision; -1: report the cursor */
	char	   *config_hash;	/* eh_set_config_hash's, or NULL */
	ehi_sub_stats stats;		/* stats.c */
	struct eh_sub *next;
} eh_sub;

/* How the client learns of new events on its connection. */
typedef enum listen_mode
{
	LISTEN_OFF,					/* polling only; see no_listen */
	LISTEN_PROBING,				/* waiting for the probe notification */
	LISTEN_STARTING,			/* the probe arrived: LISTEN eventhub is due */
	LISTEN_ON					/* LISTEN eventhub works */
} listen_mode;

/* Why the client polls only. */
typedef enum no_listen_reason
{
	NO_LISTEN_NONE = 0,
	NO_LISTEN_DISABLED,			/* eh_set_listen(client, 0) */
	NO_LISTEN_STANDBY,			/* the server is a hot standby */
	NO_LISTEN_POOLED,			/* notifications do not arrive (transaction pooling) */
	NO_LISTEN_FAILED			/* LISTEN or the probe failed */
} no_listen_reason;

/* The query out on the client's connection, and what its answer is for. */
typedef enum op_kind
{
	OP_NONE,
	OP_HELLO,					/* the first query of a connection */
	OP_PROBE_LISTEN,			/* LISTEN on the probe channel */
	OP_LISTEN,					/* UNLISTEN the probe, LISTEN eventhub */
	OP_PREPARE,					/* preparing a statement */
	OP_STATE,					/* the poll of the subscriptions' heads */
	OP_DISCOVER,				/* the poll of every organization (follow all) */
	OP_TOKENS,					/* tokens of organizations just discovered */
	OP_KEYS,					/* data keys, and the notifier's pid */
	OP_HEAD,					/* one head, for a resync */
	OP_FETCH,					/* events of one subscription */
	OP_HEARTBEAT,
	OP_PUBLISH,
	OP_SNAP_BEGIN,				/* BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY */
	OP_SNAP_HEAD,				/* eventhub.snapshot_head() */
	OP_SNAP_PAGE,				/* a page of eventhub.snapshot_entities() */
	OP_SNAP_END,				/* COMMIT, or ROLLBACK after a failure */
	OP_WAIT						/* CALL eventhub.wait_for_events() */
} op_kind;

/* The statements prepared on connections that keep their session. */
typedef enum ehi_stmt
{
	STMT_FETCH,
	STMT_STATE,
	STMT_DISCOVER,
	STMT_WAIT,
	STMT_COUNT
} ehi_stmt;

/* The eh_set_* settings. */
typedef struct ehi_settings
{
	int			poll_interval_ms;
	int			fallback_poll_interval_ms;
	int			batch_size;
	int			batch_bytes;
	int			query_timeout_ms;
	int			close_timeout_ms;
	int			backoff_initial_ms;
	int			backoff_max_ms;
	int			listen_enabled;
} ehi_settings;

typedef struct ehi_callbacks
{
	eh_event_cb event;
	void	   *event_arg;
	eh_resync_cb resync;
	void	   *resync_arg;
	eh_transaction_cb transaction;
	void	   *transaction_arg;
	eh_snapshot_cb snapshot;
	void	   *snapshot_arg;
	eh_log_cb	log;
	void	   *log_arg;
} ehi_callbacks;

/* link.c: the client's connection, the query out on it, its backoffs. */
typedef struct ehi_link
{
	ehi_conn	conn;
	int			ever_connected;
	int			hello_done;		/* the connection answered its first query */
	op_kind		op;				/* out on conn */
	eh_sub	   *op_sub;			/* the subscription it is for, or NULL */
	int			op_stmt;		/* OP_PREPARE: which statement */
	unsigned	prepared;		/* statements prepared on conn (1 << stmt) */
	int			prepare_off;	/* prepared statements failed on conn */
	int			backoff_ms;		/* the next reconnect's */
	int			error_backoff_ms;	/* after a failed query */
	int64_t		paused_until;	/* monotonic ms: no query before, after a failed one */
	int64_t		reconnect_at;	/* monotonic ms */
	int64_t		next_poll_at;	/* monotonic ms; 0: now */
	int			legacy_fetch;	/* the server has no usable transactions_since: fetch
								 * with events_since, as 0.3.0 did (until reconnecting) */
	uint64_t	failures;		/* connection attempts failed and connections lost */
	int64_t		op_sent_at;		/* monotonic ms: when the last query went out */
	/* Notifications that carry their events (keys.c) */
	int			events_channel; /* listening on eventhub_events (else eventhub) */
	int			notifier_pid;	/* the server's notifier, as it said; 0: unknown */
	int			keys_due;		/* data keys or the notifier's pid are to be read */
	int			keys_unusable;	/* the server has no usable notification_data_key
								 * (until reconnecting) */
	int64_t		keys_asked_at;	/* monotonic ms */
	int64_t		keys_retry_at;	/* monotonic ms: not before, after a failure */
	int			cipher_ready;	/* ehi_sealed_prepare() ran */
} ehi_link;

/* session.c: whether notifications reach the connection (the LISTEN probe). */
typedef struct ehi_listen
{
	listen_mode mode;
	no_listen_reason no_listen;
	no_listen_reason no_listen_logged;	/* the reason last logged */
	int			promoted;		/* a standby was promoted: choose again */
	int			probe_after_catchup;	/* a reconnect: the probe waits until the
										 * first catch-up is done */
	char		probe_channel[48];
	int			probe_received;
	ehi_conn	probe_conn;		/* the probe's NOTIFY connection */
	int			probe_sent;		/* its NOTIFY is out */
	int64_t		probe_deadline; /* monotonic ms */
} ehi_listen;

/* wait.c: waiting without LISTEN. */
typedef struct ehi_wait
{
	int			works;			/* a wait answered on this connection */
	int			slow_poll;		/* waits stand in for the fallback poll */
	int			unusable;		/* the server refused to wait: poll */
	int			timeout_ms;		/* of the wait out */
} ehi_wait;

/* discovery.c: eh_subscribe_all(). */
#define EHI_UNKNOWN_TOKENS 64
typedef struct ehi_follow_all
{
	int			on;
	int64_t		from;			/* 0 or EH_FROM_HEAD */
	int			discovered;		/* a discovery has answered since subscribing */
	int64_t		next_discover_at;	/* monotonic ms; 0: none due */
	int64_t		last_discover_at;
	char	   *tokens_pending; /* array literal of organizations needing a token */
	int			refresh_tokens; /* an unknown token came: read every token again */
	char		unknown[EHI_UNKNOWN_TOKENS][EH_TOKEN_LEN + 1];	/* tokens seen, not ours */
	int			nunknown;
} ehi_follow_all;

/* rows.c: the rest of a batch whose delivery a callback stopped. */
typedef struct ehi_held
{
	PGresult   *res;			/* NULL: none */
	eh_sub	   *sub;
	int			row;			/* the next row to deliver */
	int64_t		asked_at;		/* when its fetch was sent */
} ehi_held;

/*
 * snapshot_pages.c: the snapshot under way on the client's connection, one at a
 * time.  Its transaction is open from BEGIN to COMMIT or ROLLBACK; nothing
 * else may use the connection meanwhile.
 */
typedef enum ehi_snap_next
{
	SNAP_NEXT_HEAD,				/* BEGIN went out: snapshot_head() */
	SNAP_NEXT_PAGE,				/* a page of entities */
	SNAP_NEXT_COMMIT,			/* an empty page came: every entity was read */
	SNAP_NEXT_ROLLBACK			/* it failed or its subscription went */
} ehi_snap_next;

typedef struct ehi_snapshot
{
	eh_sub	   *sub;			/* whose snapshot; NULL: none, or its subscription went */
	int			open;			/* BEGIN went out and no COMMIT/ROLLBACK answered yet */
	ehi_snap_next next;			/* the query that goes next while open */
	int			begun;			/* BEGIN went to the callback: an ABORT or END is owed */
	uint64_t	failures;		/* link.failures when it began: the connection it is on */
	int64_t		head;
	int64_t		head_asked_at;	/* when snapshot_head() was sent */
	char		head_version[EH_VERSION_ID_LEN + 1];	/* "" for an organization without events */
	char	   *after_type;		/* the keyset: the last entity of the last page */
	char	   *after_id;
	int64_t		entities;		/* delivered so far */
} ehi_snapshot;

/* registry.c: the replica and its heartbeats. */
typedef struct ehi_replica
{
	char	   *id;				/* NULL: no heartbeats */
	char	   *labels;
	char	   *version;
	char	   *conninfo;		/* NULL: heartbeats on the client's connection */
	ehi_conn	conn;
	int			failing;		/* the last heartbeat failed (and was logged) */
	int			interval_ms;
	int64_t		next_at;		/* monotonic ms; 0: now */
} ehi_replica;

/* session.c: eh_publish_send()'s publish, until eh_publish_result() takes it. */
typedef enum ehi_publish_state
{
	PUBLISH_NONE,
	PUBLISH_QUEUED,				/* waits for the connection */
	PUBLISH_SENT,
	PUBLISH_DONE				/* rc, revision and the error are set */
} ehi_publish_state;

/* publish_event's arguments: organization, event type, action, entity, correlation id, data. */
#define EHI_PUBLISH_NPARAMS 6

typedef struct ehi_publish
{
	ehi_publish_state state;
	char	   *params[EHI_PUBLISH_NPARAMS];	/* copies of eh_publish_send()'s arguments */
	int64_t		deadline;		/* monotonic ms: sent by then, or it fails */
	uint64_t	failures;		/* link.failures when it was queued */
	int			rc;
	int64_t		revision;
	char		errmsg[1024];	/* the size of eh_client's */
	char		sqlstate[6];
} ehi_publish;

/*
 * The handle.  Each part is its owner's (the file named beside it); the
 * ones without an owner are the session's and the public calls' (session.c,
 * client.c).
 */
struct eh_client
{
	char	   *conninfo;
	ehi_settings cfg;			/* settings.c */
	ehi_callbacks cb;			/* settings.c */
	ehi_link	link;			/* link.c */
	ehi_listen	listen;			/* session.c */
	ehi_wait	wait;			/* wait.c */

	/* subscriptions.c */
	eh_sub	   *subs;			/* in subscription order */
	eh_sub	   *fetch_next;		/* where the round-robin of fetches goes on */
	ehi_map		by_org;
	ehi_map		by_token;
	ehi_follow_all all;			/* discovery.c */
	ehi_all_stats all_stats;	/* stats.c */
	ehi_held	held;			/* rows.c */
	ehi_snapshot snap;			/* snapshot_pages.c */

	ehi_replica replica;		/* registry.c */
	ehi_publish publish;		/* session.c */

	/* The eh_process() call under way. */
	int			stop;			/* the event callback asked to stop */
	int			in_callback;	/* a callback runs: subscriptions are fixed */
	int			delivered;		/* events delivered by this eh_process() call */
	int			pending_error;	/* an EH_ERR_* for this eh_process() call, or 0 */
	int			deferred_error; /* an error eh_process() returns next time */

	uint64_t	counters[EH_STAT_COUNT];
	double		last_lag_ms;
	uint64_t	rng;
	char		errmsg[1024];
	char		sqlstate[6];
};

/* util.c */
int64_t		ehi_now_ms(void);
double		ehi_random_unit(eh_client *c);
void		ehi_set_error(eh_client *c, const char *fmt,...) __attribute__((format(printf, 2, 3)));
void		ehi_log(eh_client *c, eh_log_level level, const char *fmt,...) __attribute__((format(printf, 3, 4)));
void		ehi_set_result_error(eh_client *c, const ehi_conn *ac, const PGresult *res, const char *what);
/* Whether a failure with this SQLSTATE ("" none) may pass by itself. */
int			ehi_sqlstate_retryable(const char *sqlstate);

/* link.c: the client's connection */
void		ehi_start_connecting(eh_client *c);
void		ehi_connection_lost(eh_client *c, const char *why);
int			ehi_send(eh_client *c, op_kind op, eh_sub *sub, const char *sql, int nparams,
					 const char *const *params);
int			ehi_send_stmt(eh_client *c, op_kind op, eh_sub *sub, ehi_stmt stmt, const char *sql,
						  int nparams, const char *const *params);
int			ehi_result_failed(eh_client *c, const PGresult *res, const char *what);
void		ehi_query_failed(eh_client *c, PGresult *res, const char *what);
void		ehi_schedule_poll(eh_client *c);
int			ehi_current_poll_interval(const eh_client *c);
void		ehi_retry_later(eh_client *c);

/* link.c: whether the connection is up and answered its first query */
int			ehi_link_up(const eh_client *c);

/* stats.c */
void		ehi_stats_sub_started(eh_client *c, eh_sub *s);
void		ehi_stats_sub_ended(eh_client *c, eh_sub *s);
void		ehi_stats_at_head(eh_client *c, eh_sub *s, int64_t asked_at);
void		ehi_stats_discovered(eh_client *c, int64_t asked_at);
void		ehi_stats_resync(eh_sub *s, eh_resync_reason reason);
void		ehi_stats_follow_all(eh_client *c);

/*
 * What the exposition sees of a subscription: walking them is
 * subscriptions.c's (ehi_sub_walk_next, passed in by eh_render_metrics).
 */
typedef struct ehi_sub_view
{
	const char *org;
	int			automatic;		/* added by eh_subscribe_all() */
	int			has_applied;	/* it has a cursor (it does not wait for the head) */
	int64_t		applied;		/* eh_ack's revision, else the cursor */
	const ehi_sub_stats *stats;
} ehi_sub_view;
/* The subscription after after (the first for NULL) into *view; NULL after the last. */
typedef const eh_sub *(*ehi_sub_walk) (const eh_client *c, const eh_sub *after, ehi_sub_view *view);
int			ehi_stats_render(const eh_client *c, ehi_sub_walk walk, char *buf, size_t len);

/* snapshot_pages.c */
int			ehi_snapshot_open(const eh_client *c);
int			ehi_next_snapshot_query(eh_client *c, eh_sub *s);
void		ehi_handle_snapshot(eh_client *c, op_kind op, PGresult *res);
void		ehi_snapshot_check_link(eh_client *c);
void		ehi_snapshot_cancel(eh_client *c, eh_sub *s);
void		ehi_snapshot_rollback_now(eh_client *c, int64_t deadline);
void		ehi_snapshot_free(eh_client *c);

/*
 * rows.c.  The columns of the fetch queries' rows (fetch.c), which a
 * notification's events are laid out as (ehi_sealed_rows: COL_ORG to
 * COL_HEAD).
 */
enum
{
	COL_ORG, COL_REVISION, COL_VERSION, COL_PTS, COL_OTS, COL_TYPE, COL_ACTION, COL_ENTITY,
	COL_CORRELATION, COL_DATA, COL_LAG, COL_FIRST, COL_END, COL_HEAD, COL_UPTO
};
int			ehi_deliver_rows(eh_client *c, eh_sub *s, PGresult *res, int row, int64_t asked_at);
int			ehi_deliver_held(eh_client *c);
int			ehi_held_pending(const eh_client *c);
void		ehi_drop_held(eh_client *c);
void		ehi_drop_held_of(eh_client *c, const eh_sub *s);
PGresult   *ehi_sealed_rows(const char *org, const ehi_sealed *ev);

/* subscriptions.c */
eh_sub	   *ehi_find_sub(const eh_client *c, const char *org);
eh_sub	   *ehi_subscribed(eh_client *c, const char *org);
eh_sub	   *ehi_sub_by_token(const eh_client *c, const char *token);
eh_sub	   *ehi_add_sub(eh_client *c, const char *org, int64_t cursor, const char *version, int automatic);
void		ehi_set_token(eh_client *c, eh_sub *s, const char *token);
void		ehi_set_version(eh_sub *s, const char *version);
void		ehi_forget_sub(eh_client *c, eh_sub *s);
void		ehi_take_over_sub(eh_client *c, eh_sub *s, int64_t cursor, const char *version);
void		ehi_remove_sub(eh_client *c, eh_sub *s);
void		ehi_free_subs(eh_client *c);
eh_sub	   *ehi_next_to_fetch(eh_client *c);
eh_sub	   *ehi_sub_to_resync(const eh_client *c);
int			ehi_subs_want_work(const eh_client *c);
int			ehi_subs_lack_token(const eh_client *c);
eh_sub	   *ehi_sub_next(const eh_client *c, const eh_sub *after);
eh_sub	   *ehi_sub_wanting_snapshot(const eh_client *c);
const eh_sub *ehi_sub_walk_next(const eh_client *c, const eh_sub *after, ehi_sub_view *view);

/* resync.c */
int			ehi_resync_by_snapshot(eh_client *c, eh_sub *s, eh_resync_reason reason);
void		ehi_compare_head(eh_client *c, eh_sub *s, int64_t head, const char *head_version,
							 const char *cursor_version);
int			ehi_send_head(eh_client *c);
void		ehi_handle_head(eh_client *c, eh_sub *s, PGresult *res);

/* state_poll.c */
void		ehi_check_promotion(eh_client *c, int in_recovery);
int			ehi_send_state(eh_client *c);
void		ehi_handle_state(eh_client *c, PGresult *res);

/* discovery.c */
void		ehi_discovery_asked(eh_client *c, int64_t now);
int			ehi_send_discover(eh_client *c, int64_t now);
void		ehi_handle_discover(eh_client *c, PGresult *res);
int			ehi_tokens_pending(const eh_client *c);
int			ehi_send_tokens(eh_client *c);
void		ehi_handle_tokens(eh_client *c, PGresult *res);
int			ehi_discovery_unknown_token(eh_client *c, const char *token);
int			ehi_discovery_start(eh_client *c, int64_t from);
void		ehi_discovery_free(eh_client *c);
int64_t		ehi_discovery_due_at(const eh_client *c);
int			ehi_discovery_on(const eh_client *c);

/* fetch.c */
int			ehi_next_fetch(eh_client *c);
int			ehi_handle_fetch(eh_client *c, eh_sub *s, PGresult *res);

/* keys.c (ehi_keys_again: data keys not known are to be asked for again) */
void		ehi_keys_again(eh_client *c);
int			ehi_send_keys(eh_client *c, int64_t now);
void		ehi_handle_keys(eh_client *c, PGresult *res);
int			ehi_keys_from_notifier(eh_client *c, int pid);
void		ehi_keys_notifier_restarted(eh_client *c);

/* notifications.c */
void		ehi_drain_notifications(eh_client *c);

/* delivery.c */
int			ehi_next_catalog_query(eh_client *c);
int			ehi_handle_delivery(eh_client *c, op_kind op, eh_sub *sub, PGresult *res);
int			ehi_work_pending(const eh_client *c);

/* wait.c */
void		ehi_wait_reset(eh_client *c);
int			ehi_send_wait(eh_client *c, int64_t until);
int			ehi_next_array_element(const char **p, char *buf, size_t len);
void		ehi_handle_wait(eh_client *c, PGresult *res);

/* registry.c */
int			ehi_heartbeat_due(const eh_client *c);
int			ehi_send_heartbeat(eh_client *c);
void		ehi_handle_heartbeat(eh_client *c, const ehi_conn *ac, PGresult *res);
void		ehi_drive_heartbeat_conn(eh_client *c);
void		ehi_deregister(eh_client *c);
void		ehi_free_replica(eh_client *c);
int			ehi_heartbeat_route(const eh_client *c);
int64_t		ehi_heartbeat_next_at(const eh_client *c);
void		ehi_heartbeat_now(eh_client *c);
const ehi_conn *ehi_heartbeat_conn(const eh_client *c);

/* session.c */
void		ehi_drive(eh_client *c);
int			ehi_timeout_ms(const eh_client *c, int all_sockets);
int			ehi_sockets(const eh_client *c, int *fds, int *wants, int max);
void		ehi_publish_clear(eh_client *c);

/* settings.c: an identifier's check (not empty, at most EH_MAX_ID_BYTES) */
int			ehi_check_id(eh_client *c, const char *what, const char *id);

#endif							/* EVENTHUB_INTERNAL_H */
