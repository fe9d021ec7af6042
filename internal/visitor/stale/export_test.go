package stale

// BufferedForTest reports how many body bytes rec holds: its buffer's
// capacity, since that is what it costs.
func (rec *Capture) BufferedForTest() int { return cap(rec.body) }
