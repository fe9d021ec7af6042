package tunnel

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestOnFreshStackReturns(t *testing.T) {
	v, err := onFreshStack(func() (int, error) { return 7, nil })
	if v != 7 || err != nil {
		t.Fatalf("onFreshStack = %d, %v, want 7, nil", v, err)
	}
	v, err = onFreshStack(func() (int, error) { return 0, io.ErrUnexpectedEOF })
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("onFreshStack error = %v, want f's", err)
	}
}

// A panic in f reaches the caller, where the session's recovery is, with
// its value and the stack it was raised on.
func TestOnFreshStackCarriesPanic(t *testing.T) {
	cause := errors.New("registry broke")
	var got any
	func() {
		defer func() { got = recover() }()
		onFreshStack(func() (struct{}, error) { panicInRegistry(cause); return struct{}{}, nil })
	}()
	p, ok := got.(*freshStackPanic)
	if !ok {
		t.Fatalf("recovered %T %v, want a *freshStackPanic", got, got)
	}
	if !errors.Is(p, cause) {
		t.Errorf("the panic does not unwrap to its value: %v", p)
	}
	if s := fmt.Sprint(p); !strings.Contains(s, "registry broke") || !strings.Contains(s, "panicInRegistry") {
		t.Errorf("panic text = %q, want the value and the stack of the goroutine that panicked", s)
	}
}

func panicInRegistry(err error) { panic(err) }
