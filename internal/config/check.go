package config

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// checker collects validation problems, naming each key's source.
type checker struct {
	src  *Sources
	errs []*Error
}

func (v *checker) add(key, format string, args ...any) {
	v.errs = append(v.errs, newError(key, v.src.Of(key), fmt.Sprintf(format, args...)))
}

func (v *checker) positive(key string, d time.Duration) {
	if d <= 0 {
		v.add(key, "must be positive, got %s", formatDuration(d))
	}
}

func (v *checker) nonNegativeDuration(key string, d time.Duration) {
	if d < 0 {
		v.add(key, "must not be negative, got %s", formatDuration(d))
	}
}

func (v *checker) nonNegative(key string, n int64) {
	if n < 0 {
		v.add(key, "must not be negative, got %d", n)
	}
}

func (v *checker) oneOf(key, got string, set []string) {
	if !slices.Contains(set, got) {
		v.add(key, "%q is not %s", got, orList(set))
	}
}

func joinProblems(problems []*Error) error {
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = p
	}
	return errors.Join(errs...)
}
