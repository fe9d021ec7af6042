package acme

import "golang.org/x/time/rate"

// SetServerBucketForTest replaces the server-wide bucket, so that a test
// of the other budgets is not cut short by it.
func (m *Manager) SetServerBucketForTest(burst int) {
	m.limit = rate.NewLimiter(rate.Inf, burst)
}
