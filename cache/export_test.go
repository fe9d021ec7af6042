package cache

// BufferedForTest reports how many body bytes rec holds: its buffer's
// capacity, since that is what it costs.
func (rec *Recording) BufferedForTest() int { return cap(rec.body) }
