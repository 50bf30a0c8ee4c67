package kinds

import "testing"

func TestStage(t *testing.T) {
	for kind, want := range map[string]int{"Namespace": 0, "CustomResourceDefinition": 1, "Secret": 3, "Service": 5,
		"StatefulSet": 6, "Ingress": 7, "Widget": 8} {
		if got := Stage(kind); got != want {
			t.Errorf("Stage(%s) = %d, want %d", kind, got, want)
		}
	}
	if Stages() != len(ApplyOrder())+1 {
		t.Errorf("Stages() = %d, want %d", Stages(), len(ApplyOrder())+1)
	}
}

// ApplyOrder's caller may change what it gets: the order stays.
func TestApplyOrderIsACopy(t *testing.T) {
	order := ApplyOrder()
	order[0][0] = "Ingress"
	order[1] = nil
	if Stage("Namespace") != 0 || Stage("CustomResourceDefinition") != 1 || ApplyOrder()[0][0] != "Namespace" {
		t.Error("a change to ApplyOrder's result changed the order")
	}
}
