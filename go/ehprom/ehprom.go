// Package ehprom exports a Watcher's state as Prometheus metrics, with
// the names and meaning of the C library's eh_render_metrics
// (docs/client.md, Metrics): a dashboard or alert written for
// `eventhub watch` works for a Go watcher. Register the collector in the
// registry of your choice; nothing is registered globally.
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(ehprom.NewCollector(watcher))
package ehprom

import (
	"github.com/prometheus/client_golang/prometheus"

	eventhub "github.com/eventhub/eventhub/go"
)

var (
	connected = prometheus.NewDesc("eventhub_client_connected",
		"1 while the connection is up and caught up once, else 0", nil, nil)
	ready = prometheus.NewDesc("eventhub_client_ready",
		"1 once the subscription applied a snapshot or reached the database's head", []string{"subscription"}, nil)
	freshness = prometheus.NewDesc("eventhub_client_freshness_seconds",
		"seconds since the cursor was last confirmed equal to the database's head", []string{"subscription"}, nil)
	applied = prometheus.NewDesc("eventhub_client_applied_revision",
		"the revision applied (for \"*\": the sum over its organizations)", []string{"subscription"}, nil)
	resyncs = prometheus.NewDesc("eventhub_client_resyncs_total",
		"resyncs, by reason", []string{"subscription", "reason"}, nil)
	wakeups = prometheus.NewDesc("eventhub_client_wakeups_total",
		"notifications received and polls of the heads", []string{"source"}, nil)
	fetches = prometheus.NewDesc("eventhub_client_fetches_total",
		"event fetches run", nil, nil)
	reconnects = prometheus.NewDesc("eventhub_client_reconnects_total",
		"connections re-established after a loss", nil, nil)
	delivered = prometheus.NewDesc("eventhub_client_events_delivered_total",
		"events handed to the handler", nil, nil)
)

// Collector is a prometheus.Collector of one Watcher. Each scrape reads
// the watcher's Status and Stats.
type Collector struct {
	w *eventhub.Watcher
}

// NewCollector makes a collector of w.
func NewCollector(w *eventhub.Watcher) *Collector { return &Collector{w: w} }

// Describe sends the descriptions of the series.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{connected, ready, freshness, applied, resyncs, wakeups, fetches, reconnects, delivered} {
		ch <- d
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collect sends the series. A watcher of all organizations reports them
// together as subscription "*", so that the number of series does not
// grow with organizations: ready once a discovery answered and every one
// is ready, the stalest freshness, the sum of the revisions applied.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	stats := c.w.Stats()
	status := c.w.Status()
	ch <- prometheus.MustNewConstMetric(connected, prometheus.GaugeValue, b2f(stats.Connected))
	ch <- prometheus.MustNewConstMetric(wakeups, prometheus.CounterValue, float64(stats.Notifications), "notification")
	ch <- prometheus.MustNewConstMetric(wakeups, prometheus.CounterValue, float64(stats.Polls), "poll")
	ch <- prometheus.MustNewConstMetric(fetches, prometheus.CounterValue, float64(stats.Fetches))
	ch <- prometheus.MustNewConstMetric(reconnects, prometheus.CounterValue, float64(stats.Reconnects))
	ch <- prometheus.MustNewConstMetric(delivered, prometheus.CounterValue, float64(stats.EventsDelivered))
	if c.w.FollowsAll() {
		all := eventhub.Status{Organization: "*", Ready: c.w.Synced(), HasCursor: len(status) > 0}
		for _, s := range status {
			if s.Freshness > all.Freshness {
				all.Freshness = s.Freshness
			}
			all.HasCursor = all.HasCursor && s.HasCursor
			all.Applied.Revision += s.Applied.Revision
			for i := range s.Resyncs {
				all.Resyncs[i] += s.Resyncs[i]
			}
		}
		status = []eventhub.Status{all}
	}
	for _, s := range status {
		ch <- prometheus.MustNewConstMetric(ready, prometheus.GaugeValue, b2f(s.Ready), s.Organization)
		ch <- prometheus.MustNewConstMetric(freshness, prometheus.GaugeValue, s.Freshness.Seconds(), s.Organization)
		if s.HasCursor {
			ch <- prometheus.MustNewConstMetric(applied, prometheus.GaugeValue, float64(s.Applied.Revision), s.Organization)
		}
		for i, reason := range eventhub.ResyncReasons {
			ch <- prometheus.MustNewConstMetric(resyncs, prometheus.CounterValue, float64(s.Resyncs[i]), s.Organization, reason)
		}
	}
}
