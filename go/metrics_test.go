package eventhub_test

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	eventhub "github.com/eventhub/eventhub/go"
	"github.com/eventhub/eventhub/go/ehprom"
)

// The collector's series are the C library's (docs/client.md, Metrics),
// with the watcher's values, in a registry of the test's own.
func TestPrometheusCollector(t *testing.T) {
	conn := connect(t, testDSN)
	o := org(t)
	w, r := synced(t, eventhub.Config{Organizations: []string{o}})
	rev := publishTx(t, conn, ev(o, "a", eventhub.Create, `{}`), ev(o, "b", eventhub.Create, `{}`))
	waitFor(t, 10*time.Second, "delivered", func() bool { c, _ := r.store.Cursor(o); return c.Revision == rev })

	reg := prometheus.NewRegistry()
	reg.MustRegister(ehprom.NewCollector(w))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]*dto.Metric{}
	var names []string
	for _, f := range families {
		got[f.GetName()] = f.GetMetric()
		names = append(names, f.GetName())
	}
	sort.Strings(names)
	want := "eventhub_client_applied_revision eventhub_client_connected eventhub_client_events_delivered_total " +
		"eventhub_client_fetches_total eventhub_client_freshness_seconds eventhub_client_ready " +
		"eventhub_client_reconnects_total eventhub_client_resyncs_total eventhub_client_wakeups_total"
	if strings.Join(names, " ") != want {
		t.Fatalf("series %v, want %s", names, want)
	}
	value := func(name string, labels ...string) float64 {
		for _, m := range got[name] {
			match := true
			for i, l := range m.GetLabel() {
				if i < len(labels) && l.GetValue() != labels[i] {
					match = false
				}
			}
			if match {
				if m.Gauge != nil {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
		t.Fatalf("no %s%v", name, labels)
		return 0
	}
	if value("eventhub_client_applied_revision", o) != float64(rev) || value("eventhub_client_ready", o) != 1 ||
		value("eventhub_client_events_delivered_total") != 2 || value("eventhub_client_connected") != 1 ||
		value("eventhub_client_wakeups_total", "notification") < 1 || len(got["eventhub_client_resyncs_total"]) != 3 {
		t.Fatalf("values: %v", families)
	}
}
