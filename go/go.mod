module github.com/eventhub/eventhub/go

go 1.19

require (
	github.com/jackc/pgconn v1.11.0
	github.com/jackc/pgx/v4 v4.15.0
	github.com/prometheus/client_golang v1.14.0
	github.com/prometheus/client_model v0.3.0
)
