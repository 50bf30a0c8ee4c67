package rollout

import "testing"

func TestStatusObject(t *testing.T) {
	for _, tt := range []struct {
		s    Status
		want string
	}{
		{Status{Group: "apps", Kind: "StatefulSet", Name: "db"}, "statefulset/db"},
		{Status{Name: "composition-a"}, "deployment/composition-a"},
		{Status{Group: "example.com", Kind: "Widget", Name: "w"}, "widget.example.com/w"},
	} {
		if got := tt.s.Object(); got != tt.want {
			t.Errorf("Object() = %q, want %q", got, tt.want)
		}
	}
}
