package telemetry

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/recovery"
)

func TestPanicsRecoveredMetric(t *testing.T) {
	recovery.AllowForTest(t)
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer recovery.Recover(slog.New(slog.DiscardHandler), "test")
		panic("on purpose")
	}()
	want := fmt.Sprintf("aperio_panics_recovered_total %d\n", recovery.Total())

	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer tok")
	w := httptest.NewRecorder()
	m.Handler("tok").ServeHTTP(w, req)
	body, err := io.ReadAll(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %q:\n%s", want, body)
	}
}
