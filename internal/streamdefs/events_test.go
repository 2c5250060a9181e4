package streamdefs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
)

func TestValidateEventKey(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"k", "payment.confirmed.order-42", "payment.confirmed/order-42", "a:b=c_d-e", strings.Repeat("k", streamdefs.MaxEventKeyLen)} {
		if err := streamdefs.ValidateEventKey(key); err != nil {
			t.Errorf("%q: %v", key, err)
		}
	}
	for _, key := range []string{"", ".", "a.", ".a", "a..b", "a b", "a.*", "a.>", "a\tb", "é", strings.Repeat("k", streamdefs.MaxEventKeyLen+1)} {
		if err := streamdefs.ValidateEventKey(key); !errors.Is(err, streamdefs.ErrInvalidEventKey) {
			t.Errorf("%q: %v, want ErrInvalidEventKey", key, err)
		}
	}
}
