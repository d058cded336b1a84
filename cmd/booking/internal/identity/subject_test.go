package identity

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/retrysafe/booking/internal/jwttest"
)

// Two different subjects are two actors: a sub whose JSON text holds an
// escaped lone surrogate ("\ud800", not a Unicode character) is refused,
// never read as U+FFFD, so "a\ud800" and "a\udbff" are not one actor id.
// A subject that is Unicode text is accepted, U+FFFD itself and an escaped
// surrogate pair included.
func TestJWTSubjectsWithLoneSurrogatesAreNotOneActor(t *testing.T) {
	t.Parallel()
	key := jwttest.NewRSA(t, "k1")
	a := mustJWT(t, jwttest.NewJWKS(t, key))
	for _, tt := range []struct {
		sub  string // the claim's JSON text
		want string // the actor's subject; "" for a refusal
	}{
		{`"a\ud800"`, ""},
		{`"a\udbff"`, ""},
		{`"a\udc00b"`, ""},
		{`"a\ud800\u0041"`, ""},
		{`"a\ufffd"`, "a\ufffd"},
		{`"a` + "\ufffd" + `"`, "a\ufffd"},
		{`"\ufffd\ud83d\ude00\\u"`, "\ufffd\U0001F600\\u"},
	} {
		got, err := a.Authenticate(context.Background(), key.Sign(t, with(claimsFor("x"), "sub", json.RawMessage(tt.sub))))
		var r *Refusal
		switch {
		case tt.want == "" && !errors.As(err, &r):
			t.Errorf("sub %s: Authenticate = %+v, %v; want a refusal", tt.sub, got, err)
		case tt.want != "" && (err != nil || got.ID != testIssuer+"#"+tt.want):
			t.Errorf("sub %s: Authenticate = %+v, %v; want the actor %q", tt.sub, got, err, testIssuer+"#"+tt.want)
		}
	}
}
