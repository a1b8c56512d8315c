/*
 * eventhub.h: libeventhub, the C client of the eventhub PostgreSQL extension.
 *
 * A client follows one or more organizations (or all of them, present and
 * future) over one libpq connection and hands their events to a callback in
 * revision order, exactly once per subscription: woken by LISTEN eventhub,
 * and also polling
 * eventhub.organization_states every poll interval, so that a lost
 * notification, a connection where LISTEN cannot work or a dead network path
 * loses nothing.  It finds out by itself whether notifications reach its
 * connection (not on a hot standby, not behind a transaction-pooling proxy)
 * and polls at a short fallback interval where they do not.  It reconnects
 * with backoff and catches up from its cursor, a revision and its version
 * id, and calls a resync callback when the database can no longer give it
 * the events it missed or no longer has the history it applied.
 *
 * It never waits for the network in eh_process(): it connects, queries and
 * reconnects with libpq's non-blocking calls, and tells the caller which
 * sockets to wait on and for what (eh_sockets, or eh_socket and
 * eh_socket_wants for the client's connection alone) and for how long
 * (eh_timeout_ms, eh_next_timeout_ms), so that it fits in any event loop.
 * eh_wait() is that loop, for callers without one.  Publishing has both
 * forms: eh_publish_send() and eh_publish_result() never wait, eh_publish()
 * waits for the answer.  eh_client_free() waits at most the close timeout.
 *
 * Conventions (libpq's):
 *  - eh_client is opaque; accessors take a const pointer.
 *  - Functions returning int return EH_OK (0) or a negative EH_ERR_* code;
 *    eh_error_message() then describes the failure.  The library never
 *    prints (unless a log callback is set) and never exits or aborts.
 *  - Strings passed in are copied; the caller keeps ownership of them.
 *    Strings handed out (events, messages) belong to the library and are
 *    valid only for the time stated at each function.
 *  - One eh_client must not be used by two threads at once; separate
 *    clients are independent (the library has no global state).
 */
#ifndef EVENTHUB_CLIENT_H
#define EVENTHUB_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EVENTHUB_VERSION_MAJOR 0
#define EVENTHUB_VERSION_MINOR 5
#define EVENTHUB_VERSION_PATCH 0
#define EVENTHUB_VERSION "0.5.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, for #if comparisons. */
#define EVENTHUB_VERSION_NUM 500

/* Return codes. */
#define EH_OK 0
#define EH_ERR_ARGUMENT (-1)	/* invalid argument or call in the wrong state */
#define EH_ERR_MEMORY (-2)		/* out of memory */
#define EH_ERR_CONNECTION (-3)	/* no usable connection (the client retries by itself) */
#define EH_ERR_SERVER (-4)		/* the server refused a request; see eh_error_sqlstate() */

/*
 * The server's limit on organization, replica and correlation ids, in
 * bytes: longer ones are refused with EH_ERR_ARGUMENT before any query.
 */
#define EH_MAX_ID_BYTES 1024

/* after_revision of eh_subscribe(): start at the head, only new events. */
#define EH_FROM_HEAD (-1)

/*
 * after_revision of eh_subscribe() and eh_subscribe_all(): start from a
 * snapshot of the organization's current entities (the snapshot callback
 * must be set), then its events above the snapshot's head.
 */
#define EH_FROM_SNAPSHOT (-2)

/* What to wait for on eh_socket(): flags of eh_socket_wants(). */
#define EH_WANT_READ 1
#define EH_WANT_WRITE 2

/* The most sockets eh_sockets() gives: the client's, the probe's, the heartbeats'. */
#define EH_MAX_SOCKETS 3

/* eh_publish_result(): the publish is still under way. */
#define EH_PUBLISH_PENDING 1

typedef struct eh_client eh_client;

/*
 * One event, as stored in eventhub.events.  All strings are NUL-terminated;
 * timestamps are ISO 8601 in UTC ("2026-01-02T03:04:05.123456Z");
 * event_data is JSON text.  Owned by the library, valid only during the
 * event (or transaction) callback.  The library allocates it and hands it
 * out by pointer only, so fields are appended in later releases.
 */
typedef struct eh_event
{
	const char *organization_id;
	int64_t		revision;
	const char *version_id;
	const char *processed_timestamp;
	const char *originated_timestamp;
	const char *event_type;
	const char *action;
	const char *entity_id;
	const char *correlation_id;
	const char *event_data;
	/* since 0.4.0 */
	int64_t		transaction_first_revision; /* the first revision of its
											 * transaction; its own revision
											 * when unknown (before 0.4.0) */
	int			transaction_end;	/* 1: the last event of its transaction */
} eh_event;

/*
 * One entity of a snapshot: an entity's latest event, never a DELETE
 * (action is "CREATE" or "UPDATE").  Strings as in eh_event; owned by the
 * library, valid only during the snapshot callback; fields may be
 * appended in later releases.
 */
typedef struct eh_entity
{
	const char *organization_id;
	const char *event_type;
	const char *entity_id;
	int64_t		revision;		/* of its latest event */
	const char *version_id;
	const char *action;
	const char *event_data;
	const char *originated_timestamp;
} eh_entity;

/*
 * The steps of a snapshot, in the order the snapshot callback sees them;
 * eh_snapshot_phase_name() gives "begin", "entities", "end", "abort".
 */
typedef enum eh_snapshot_phase
{
	EH_SNAPSHOT_BEGIN = 1,		/* what follows replaces the organization's state */
	EH_SNAPSHOT_ENTITIES = 2,	/* a page of entities */
	EH_SNAPSHOT_END = 3,		/* complete at the head: drop every entity it did not name */
	EH_SNAPSHOT_ABORT = 4		/* discard what this snapshot gave; another one follows */
} eh_snapshot_phase;

/*
 * Why the client asks the application to reload an organization;
 * eh_resync_reason_name() gives its name ("history_removed"...).
 */
typedef enum eh_resync_reason
{
	EH_RESYNC_HISTORY_REMOVED = 1,	/* retention removed events not yet delivered (SQLSTATE ZE001) */
	EH_RESYNC_CURSOR_AHEAD = 2, /* the server's head is below the cursor (ZE002; failover, restore) */
	EH_RESYNC_VERSION_MISMATCH = 3	/* the event at the cursor has another version_id: history
									 * rewritten, a failover (ZE003) */
} eh_resync_reason;

/* Log levels; eh_log_level_name() gives "debug", "info"... */
typedef enum eh_log_level
{
	EH_LOG_DEBUG = 0,
	EH_LOG_INFO = 1,
	EH_LOG_WARNING = 2,
	EH_LOG_ERROR = 3
} eh_log_level;

/*
 * Counters, read one at a time with eh_stat(); eh_stat_name() gives their
 * names ("events_delivered"...).  New counters are added before
 * EH_STAT_COUNT, never in between: a caller built with an older header
 * keeps reading the counters it knows.
 */
typedef enum eh_stat_id
{
	EH_STAT_EVENTS_DELIVERED = 0,	/* event callbacks that returned */
	EH_STAT_NOTIFICATIONS = 1,	/* eventhub notifications received */
	EH_STAT_POLLS = 2,			/* periodic checks of organization_states */
	EH_STAT_RECONNECTS = 3,		/* connections re-established after a loss */
	EH_STAT_RESYNCS = 4,		/* resync callbacks */
	EH_STAT_HEARTBEATS = 5,		/* heartbeats recorded by the server */
	EH_STAT_FETCHES = 6,		/* event fetches run (transactions_since) */
	EH_STAT_DISCOVERIES = 7,	/* organizations found by eh_subscribe_all() */
	EH_STAT_SNAPSHOTS = 8,		/* snapshots completed (END) */
	EH_STAT_SNAPSHOT_ENTITIES = 9,	/* entities delivered by snapshots */
	EH_STAT_SEALED_DELIVERIES = 10, /* notifications whose events were
									 * delivered from the notification itself,
									 * with no fetch */
	EH_STAT_COUNT
} eh_stat_id;

/*
 * Called once per event, in revision order per organization.  Return 0 to
 * go on; return non-zero to stop delivering for now: the event counts as
 * delivered, and eh_process()/eh_wait() return after it.  The event and its
 * strings are valid only during the call.  The callback must not call
 * eh_process(), eh_wait() or eh_client_free() on this client;
 * eh_subscribe() and eh_unsubscribe() refuse to run from it.
 */
typedef int (*eh_event_cb) (eh_client *client, const eh_event *event, void *arg);

/*
 * Called when an organization's missed events cannot be delivered: reload
 * the organization's full state from the application's own tables.  After
 * it returns, the client continues from head_revision (it delivers only
 * events above it).  organization_id is valid only during the call.
 */
typedef void (*eh_resync_cb) (eh_client *client, const char *organization_id,
							  eh_resync_reason reason, int64_t head_revision, void *arg);

/*
 * Called once per transaction, with its events in revision order, instead
 * of the event callback when set.  A transaction over the batch limits
 * (eh_set_batch_size, eh_set_batch_bytes) comes in parts: ends_transaction
 * is 0 on all but the last.  Return non-zero to stop delivering for now,
 * as with eh_event_cb (the events count as delivered).  The events and
 * their strings are valid only during the call; the same rules as the
 * event callback's apply.
 */
typedef int (*eh_transaction_cb) (eh_client *client, const char *organization_id,
								  const eh_event *const *events, int n_events, int ends_transaction,
								  void *arg);

/*
 * Called for each step of a snapshot of an organization: BEGIN (what
 * follows replaces the organization's state), ENTITIES with a page of
 * n_entities entities, END when it is complete at head_revision and
 * head_version (drop every entity it did not name; events above the head
 * follow), or ABORT (discard what this snapshot gave so far: another one
 * follows).  reason is 0 for a snapshot asked for with EH_FROM_SNAPSHOT,
 * else the eh_resync_reason it answers.  head_revision and head_version
 * are set at BEGIN and END (head_version NULL for an organization without
 * events).  A snapshot's transaction is open on the client's connection
 * during the call: it must not block.  Everything is valid during the call
 * only; the rules of the event callback apply.
 */
typedef void (*eh_snapshot_cb) (eh_client *client, const char *organization_id,
								eh_snapshot_phase phase, int reason,
								const eh_entity *const *entities, int n_entities,
								int64_t head_revision, const char *head_version, void *arg);

/* Receives the library's log lines (connection lost, LISTEN unavailable...). */
typedef void (*eh_log_cb) (eh_client *client, eh_log_level level, const char *message, void *arg);

/*
 * Creates a client.  conninfo is a libpq connection string or URI (NULL or ""
 * uses libpq's PG* environment variables).  TCP keepalives are on unless
 * conninfo says otherwise.  Does not connect: eh_connect(), eh_process() or
 * eh_wait() does.  Returns NULL only when out of memory.  Free with
 * eh_client_free().
 */
eh_client  *eh_client_new(const char *conninfo);

/*
 * Deregisters the replica (if one was set and a connection is up), closes
 * the connections and frees the client and everything it owns.  Waits at
 * most the close timeout (eh_set_close_timeout, default 1000 ms) for the
 * deregistration: a server that does not answer in time leaves the
 * replica to expire after eventhub.replica_ttl.
 */
void		eh_client_free(eh_client *client);

/* Callbacks; arg is passed back unchanged.  A NULL callback removes it. */
int			eh_set_event_callback(eh_client *client, eh_event_cb cb, void *arg);
int			eh_set_resync_callback(eh_client *client, eh_resync_cb cb, void *arg);
int			eh_set_log_callback(eh_client *client, eh_log_cb cb, void *arg);

/*
 * Since 0.4.0.  With a transaction callback, events go to it, a
 * transaction at a time, instead of to the event callback.
 */
int			eh_set_transaction_callback(eh_client *client, eh_transaction_cb cb, void *arg);

/*
 * Since 0.4.0.  With a snapshot callback, EH_FROM_SNAPSHOT may be used,
 * and a resync (history removed, cursor ahead, version mismatch) is
 * answered by a snapshot instead of the resync callback.  A snapshot the
 * server reports incomplete (SQLSTATE ZE004: events that were the latest
 * of their entities were removed) falls back to the resync callback, or
 * is retried with backoff without one.
 */
int			eh_set_snapshot_callback(eh_client *client, eh_snapshot_cb cb, void *arg);

/*
 * Poll interval in milliseconds (default 5000, at least 10).  Each wait is
 * drawn at random between 80% and 120% of it, so that replicas spread out.
 */
int			eh_set_poll_interval(eh_client *client, int interval_ms);

/*
 * Poll interval in milliseconds while notifications cannot reach the
 * connection (a hot standby, a transaction-pooling proxy, LISTEN failing;
 * default 250, at least 10).  A poll interval set lower wins.
 */
int			eh_set_fallback_poll_interval(eh_client *client, int interval_ms);

/* Whether to LISTEN (default 1).  With 0 the client only polls, every poll interval. */
int			eh_set_listen(eh_client *client, int enabled);

/*
 * Most events fetched per query, and most entities per snapshot page
 * (default 1000, 1 to 100000).  A fetch ends at a transaction's end: it
 * returns fewer events rather than part of a transaction, unless one
 * transaction alone is over the limit.
 */
int			eh_set_batch_size(eh_client *client, int max_events);

/*
 * Most bytes of events fetched per query, and of entities per snapshot
 * page (default 8 MiB, at least 1), as the server measures them (their
 * stored size, since 0.4.0): a query returns events until their size
 * reaches this, and always at least one, ending at a transaction's end as
 * the batch size does.  With the batch size, it bounds the client's memory
 * to about this much plus the largest event.
 */
int			eh_set_batch_bytes(eh_client *client, int max_bytes);

/*
 * How long a query may take before the client gives the connection up and
 * reconnects (default 30000 ms, at least 100), and how long a connection
 * attempt may take (the same).  A server that stopped answering costs this
 * much latency, never a blocked caller.
 */
int			eh_set_query_timeout(eh_client *client, int timeout_ms);

/* The most eh_client_free() waits for the deregistration (default 1000 ms, 0: none). */
int			eh_set_close_timeout(eh_client *client, int timeout_ms);

/*
 * Reconnect backoff: first wait and cap, in ms (defaults 100 and 1000).  It
 * doubles at each failed attempt, and each wait is drawn from between half
 * the backoff and the whole of it, so the cap bounds every wait; it starts
 * over once a connection has answered a query.  The backoff after a
 * refused query grows the same way to the same cap.  After an attempt that
 * a server answered with "not now" (starting up, or a standby of a
 * multi-host conninfo while the primary is wanted) the wait is at most
 * 250 ms (or the first wait, if longer).
 */
int			eh_set_reconnect_backoff(eh_client *client, int initial_ms, int max_ms);

/*
 * Follows an organization from after_revision (0: all kept history;
 * EH_FROM_HEAD: only events published after the client first sees the
 * organization's head; EH_FROM_SNAPSHOT: a snapshot of its entities, then
 * the events above its head, which needs the snapshot callback).  Subscribing again to the same organization is an
 * error.  May be called before or after connecting.
 */
int			eh_subscribe(eh_client *client, const char *organization_id, int64_t after_revision);

/*
 * The same from a stored cursor: the revision and the version_id of the last
 * event applied (as the event or eh_cursor_version() gave them).  If this
 * database's history at that revision has another version, a failover lost
 * or rewrote what was applied: the resync callback is called
 * (EH_RESYNC_VERSION_MISMATCH, or EH_RESYNC_CURSOR_AHEAD when the head is
 * below the cursor) before anything is delivered.  after_version may be
 * NULL (no check), never with EH_FROM_HEAD.
 */
int			eh_subscribe_at(eh_client *client, const char *organization_id, int64_t after_revision,
							const char *after_version);

/*
 * Follows every organization the role may read, present and future, each
 * exactly once and in order, as if subscribed to each: the ones that exist
 * when the client first looks from `from` (0: all kept history;
 * EH_FROM_HEAD: their head; EH_FROM_SNAPSHOT: a snapshot), and every organization that appears later
 * from its first event.  Organizations subscribed explicitly (for example
 * from stored cursors with eh_subscribe_at(), before or after this call)
 * keep their own cursor.  With EH_FROM_SNAPSHOT, the organizations that
 * exist at the first look are snapshotted one after another; those found
 * later start from their first event.  New organizations are found when a notification
 * names an organization the client does not know, and at every poll.
 */
int			eh_subscribe_all(eh_client *client, int64_t from);

/*
 * Stops following an organization subscribed with eh_subscribe() or
 * eh_subscribe_at(); not one that eh_subscribe_all() follows.
 */
int			eh_unsubscribe(eh_client *client, const char *organization_id);

/*
 * The revision of the last event delivered for an organization (the
 * cursor), or -1 if it is not subscribed or still waits for its head.
 */
int64_t		eh_cursor(const eh_client *client, const char *organization_id);

/*
 * The version_id at the cursor, to store with it; NULL if unknown.  Owned by
 * the client, valid until the cursor moves or the subscription ends.
 */
const char *eh_cursor_version(const eh_client *client, const char *organization_id);

/*
 * Starts connecting, without waiting: eh_process() goes on with it, then
 * finds out whether notifications reach the connection, LISTENs (or not)
 * and catches up every subscription.  The connection counts as working,
 * and the reconnect backoff starts over, only once it has answered a first
 * query.  Returns EH_OK (also when already connected or connecting), or
 * EH_ERR_CONNECTION when libpq refused at once (a retry is scheduled),
 * EH_ERR_MEMORY.  Calling it is optional: eh_process() connects when needed.
 */
int			eh_connect(eh_client *client);

/*
 * The connection's socket, -1 while there is none; wait on it for what
 * eh_socket_wants() says, at most eh_next_timeout_ms().  The socket changes
 * when the client reconnects: ask again after every eh_process().
 */
int			eh_socket(const eh_client *client);

/* EH_WANT_READ, EH_WANT_WRITE or both: what to wait for on eh_socket(). */
int			eh_socket_wants(const eh_client *client);

/*
 * Milliseconds until eh_process() has timed work to do (a poll, a
 * reconnect, a timeout), 0 if it has work now, for a caller that waits on
 * eh_socket() alone: while the client's second connections (the LISTEN
 * probe's, the heartbeats') are under way, whose sockets such a caller
 * does not see, at most 5 ms.  Wait no longer than this.
 */
int			eh_next_timeout_ms(const eh_client *client);

/*
 * Every socket to wait on, up to max (EH_MAX_SOCKETS is enough), with what
 * to wait for on each (EH_WANT_READ, EH_WANT_WRITE or both, in wants[i]):
 * the client's connection first, then the LISTEN probe's and the
 * heartbeats' own connection while they are open.  Returns how many it
 * wrote (0 without a connection).  Like eh_socket(), they change as the
 * client goes: ask again after every eh_process().
 */
int			eh_sockets(const eh_client *client, int *fds, int *wants, int max);

/*
 * Like eh_next_timeout_ms(), for a caller that waits on every socket of
 * eh_sockets(): the real time to the next timed work, with no short
 * wake-ups while the second connections are under way.
 */
int			eh_timeout_ms(const eh_client *client);

/*
 * Processes whatever is ready, without ever waiting for the network:
 * advances a connection attempt, reads answers and notifications, delivers
 * events, sends the next query, polls and reconnects when due.  Returns the
 * number of events delivered (>= 0), or a negative EH_ERR_* code:
 * EH_ERR_SERVER when the server refused a query (eh_error_message() says
 * why; the client tries again after a backoff, not at once),
 * EH_ERR_CONNECTION when the server refused a connection for a reason a
 * retry cannot fix (eh_error_retryable() is 0: a refused login, a database
 * that does not exist; the client still retries), EH_ERR_MEMORY when out of
 * memory.  A lost connection is not an error here: the client reconnects
 * by itself.
 */
int			eh_process(eh_client *client);

/*
 * Waits up to timeout_ms (-1: forever) for events, processing as they come;
 * returns as soon as at least one event was delivered, at the timeout, or
 * when a signal interrupts the wait.  Returns the number delivered (0 at a
 * timeout or signal) or a negative EH_ERR_* code.
 */
int			eh_wait(eh_client *client, int timeout_ms);

/*
 * Starts publishing an event with eventhub.publish_event() on the client's
 * connection, without waiting: the arguments are copied, and eh_process()
 * sends the call as the next query once the connection is ready (before
 * any poll or fetch) and takes its answer.  correlation_id may be NULL
 * (the event's version id is used); event_data is JSON text.  One publish
 * at a time: EH_ERR_ARGUMENT while one is under way or its result has not
 * been taken.  Not from a callback.
 */
int			eh_publish_send(eh_client *client, const char *organization_id, const char *event_type,
							const char *action, const char *entity_id, const char *correlation_id,
							const char *event_data);

/*
 * The result of eh_publish_send()'s publish: EH_PUBLISH_PENDING (1) while
 * it is under way (call again after eh_process()); EH_OK with the event's
 * revision in *revision (revision may be NULL); or a negative EH_ERR_*
 * code with eh_error_message(): EH_ERR_SERVER when the server refused it,
 * EH_ERR_CONNECTION when no connection was ready within the query timeout
 * or the connection failed first or while the call was out (then whether
 * the event was stored is unknown: with a correlation id, publishing again
 * is safe).  A result other than EH_PUBLISH_PENDING ends the publish; the
 * next may be sent.
 */
int			eh_publish_result(eh_client *client, int64_t *revision);

/*
 * Publishes and waits for the result: eh_publish_send(), then
 * eh_process() and a wait on the client's sockets until
 * eh_publish_result() has it (events delivered meanwhile go to the
 * callback).  The wait is at most the query timeout for a connection and
 * the query timeout for the answer.
 */
int			eh_publish(eh_client *client, const char *organization_id, const char *event_type,
					   const char *action, const char *entity_id, const char *correlation_id,
					   const char *event_data, int64_t *revision);

/*
 * Replica registry.  With a replica id, the client reports its progress with
 * eventhub.heartbeat() right after connecting and then every heartbeat
 * interval: per subscription, the revision applied (by default the last
 * event whose callback returned; see eh_ack), its version_id and the
 * configuration hash set with eh_set_config_hash().  eh_client_free()
 * deregisters the replica when it can.  labels_json (a JSON object) and
 * version may be NULL.  Call before connecting.
 */
int			eh_set_replica(eh_client *client, const char *replica_id, const char *labels_json,
						   const char *version);

/* Heartbeat interval in milliseconds (default 10000, at least 100). */
int			eh_set_heartbeat_interval(eh_client *client, int interval_ms);

/*
 * Sends heartbeats (and the deregistration) over a separate connection,
 * for a replica that reads from a hot standby, where heartbeat() cannot
 * write: the primary's conninfo.  NULL: over the client's connection.  Call
 * before connecting.  A heartbeat that fails is logged once, until one
 * succeeds again.
 */
int			eh_set_heartbeat_conninfo(eh_client *client, const char *conninfo);

/*
 * The hash of the configuration the application now serves for a
 * subscribed organization, sent with the next heartbeats (NULL clears it).
 */
int			eh_set_config_hash(eh_client *client, const char *organization_id, const char *config_hash);

/*
 * For applications that apply events after the callback returns (say, from
 * a queue): report revision as applied instead of the callback's progress.
 * From the first call on for an organization, heartbeats report the
 * acknowledged revision; it may not exceed the cursor.
 */
int			eh_ack(eh_client *client, const char *organization_id, int64_t revision);

/* A counter; 0 for an id this library does not know. */
uint64_t	eh_stat(const eh_client *client, eh_stat_id id);

/*
 * Since 0.5.0.  Writes the client's metrics into buf in Prometheus' text
 * exposition format (for node_exporter's textfile collector, or a scrape
 * handler of the application's own): whether it is connected; per
 * subscription (label subscription: the organization id, or "*" for the
 * organizations eh_subscribe_all() follows, taken together) whether it is
 * ready (it applied a snapshot or reached the head once; it stays so), its
 * freshness (seconds since its cursor was last confirmed equal to the
 * database's head, as of when the confirming query was sent), its applied
 * revision and its resyncs by reason; wakeups by source (notification,
 * poll), fetches, reconnects and events delivered.  Like snprintf: writes
 * at most len bytes, the last a NUL (nothing when len is 0), and returns
 * the length of the whole text (without the NUL), so that a return >= len
 * says that buf was too small and how large it must be (plus one for the
 * NUL; freshness may gain a digit between two calls); -1 when client is
 * NULL, or buf NULL with len > 0.  Allocates nothing.  docs/client.md lists
 * the series.
 */
int			eh_render_metrics(const eh_client *client, char *buf, size_t len);

/*
 * For the last event delivered: the server's clock when it was fetched
 * minus the event's processed_timestamp, in ms (client clocks do not
 * matter); 0 before the first.
 */
double		eh_last_lag_ms(const eh_client *client);

/* Names, for logs and output; "unknown" for values this library does not know. */
const char *eh_stat_name(eh_stat_id id);
const char *eh_resync_reason_name(eh_resync_reason reason);
const char *eh_log_level_name(eh_log_level level);
const char *eh_snapshot_phase_name(eh_snapshot_phase phase);

/*
 * The message of the last failure, "" if none.  Owned by the client, valid
 * until the next call on it.
 */
const char *eh_error_message(const eh_client *client);

/* The SQLSTATE of the last EH_ERR_SERVER failure, "" otherwise.  Same lifetime. */
const char *eh_error_sqlstate(const eh_client *client);

/*
 * Whether the last failure may pass by itself, so that going on calling
 * eh_process() is right (the client retries with backoff): 0 for a refused
 * login, a missing privilege (42501), a bad argument (class 22); 1 for
 * everything else (lock and statement timeouts, serialization failures, the
 * extension reinstalled, a lost connection).
 */
int			eh_error_retryable(const eh_client *client);

/* Whether the client is connected now. */
int			eh_is_connected(const eh_client *client);

/*
 * Whether notifications are in use: 0 while it finds out, and on a hot
 * standby, behind a transaction-pooling proxy, after LISTEN failed or was
 * disabled.
 */
int			eh_is_listening(const eh_client *client);

/* The library's version, EVENTHUB_VERSION of the build. */
const char *eh_version(void);

#ifdef __cplusplus
}
#endif

#endif							/* EVENTHUB_CLIENT_H */
