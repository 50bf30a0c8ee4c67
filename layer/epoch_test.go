package layer

import (
	"strings"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// SOURCE_DATE_EPOCH is read in one place: a number of seconds is the time, unset or blank the
// Unix epoch, anything else bad input that names the variable and says what is wrong with it.
func TestSourceDateEpochValues(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  time.Time
		words string // bad input saying so
	}{
		{value: "", want: time.Unix(0, 0)},
		{value: " ", want: time.Unix(0, 0)},
		{value: "1700000000", want: time.Unix(1700000000, 0)},
		{value: " 1700000000\n", want: time.Unix(1700000000, 0)},
		{value: "8589934591", want: time.Unix(8589934591, 0)},
		{value: "yesterday", words: "SOURCE_DATE_EPOCH: 'yesterday' is not a time: not a whole number of seconds since 1970-01-01"},
		{value: "1.5", words: "'1.5' is not a time: not a whole number of seconds"},
		{value: "-1", words: "SOURCE_DATE_EPOCH: '-1' is not a time: before 1970-01-01"},
		{value: "8589934592", words: "'8589934592' is not a time: after 2242-03-16, the latest time a tar header holds (8589934591)"},
		{value: "99999999999999999999", words: "not a whole number of seconds"},
		{value: "1\x1b[2J", words: `'1\x1b[2J' is not a time`},
	} {
		t.Run(tt.value, func(t *testing.T) {
			t.Setenv("SOURCE_DATE_EPOCH", tt.value)
			got, err := SourceDateEpoch()
			if tt.words == "" {
				if err != nil || !got.Equal(tt.want) || got.Location() != time.UTC {
					t.Errorf("%v, %v; want %v", got, err, tt.want.UTC())
				}
				return
			}
			if !fault.IsInput(err) || !strings.Contains(err.Error(), tt.words) || !strings.Contains(err.Error(), "git log -1 --format=%ct") {
				t.Errorf("%v\nwant bad input saying %q", err, tt.words)
			}
		})
	}
}
