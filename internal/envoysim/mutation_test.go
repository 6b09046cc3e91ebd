package envoysim_test

import (
	"maps"
	"strings"
	"testing"

	mutationv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	earlyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/envoysim"
)

// TestEarlyHeaderMutations: removals and each append_action as Envoy applies
// them before routing, the request passed in left as it was.
func TestEarlyHeaderMutations(t *testing.T) {
	add := func(k, v string, a corev3.HeaderValueOption_HeaderAppendAction) *mutationv3.HeaderMutation {
		return &mutationv3.HeaderMutation{Action: &mutationv3.HeaderMutation_Append{Append: &corev3.HeaderValueOption{
			Header: &corev3.HeaderValue{Key: k, Value: v}, AppendAction: a}}}
	}
	hm := &earlyv3.HeaderMutation{Mutations: []*mutationv3.HeaderMutation{
		{Action: &mutationv3.HeaderMutation_Remove{Remove: "X-Internal-Key"}},
		add("x-priority", "default", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
		add("x-a", "2", corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD),
		add("x-b", "2", corev3.HeaderValueOption_ADD_IF_ABSENT),
		add("x-c", "2", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS),
		add("x-d", "2", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS),
	}}
	a, err := anypb.New(hm)
	if err != nil {
		t.Fatal(err)
	}
	exts := []*corev3.TypedExtensionConfig{{Name: "envoy.http.early_header_mutation.header_mutation", TypedConfig: a}}
	in := envoysim.Request{Path: "/", Headers: map[string]string{"x-internal-key": "forged", "x-priority": "critical", "x-a": "1", "x-b": "1", "x-c": "1"}}
	before := maps.Clone(in.Headers)
	got, err := envoysim.EarlyHeaderMutations(exts, in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"x-priority": "default", "x-a": "1,2", "x-b": "1", "x-c": "2"}
	if !maps.Equal(got.Headers, want) {
		t.Errorf("headers = %v, want %v", got.Headers, want)
	}
	if !maps.Equal(in.Headers, before) {
		t.Errorf("the request passed in changed: %v", in.Headers)
	}

	hm.Mutations = []*mutationv3.HeaderMutation{add("x-id", "%REQ(x-user)%", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)}
	a, _ = anypb.New(hm)
	exts[0].TypedConfig = a
	if _, err := envoysim.EarlyHeaderMutations(exts, in); err == nil || !strings.Contains(err.Error(), "formatters are not simulated") {
		t.Errorf("a formatter value: error %v, want one saying it is not simulated", err)
	}
}
