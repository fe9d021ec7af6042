// Package waitfor is the bench harnesses' bounded wait for a condition
// (bench/scaling, bench/soak): every wait of theirs has a deadline.
package waitfor

import (
	"context"
	"fmt"
	"time"
)

// Until calls cond every interval until it returns true, ctx ends or
// timeout passes; the error then says what was awaited and cond's last
// error.
func Until(ctx context.Context, timeout, interval time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for {
		ok, err := cond(ctx)
		if ok && err == nil {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}
