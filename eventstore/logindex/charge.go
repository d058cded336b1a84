package logindex

import "encoding/json"

// stringMember returns the member name of an event's JSON data, if it is a
// string (as PostgreSQL's data ->> name counts it: a missing member or JSON
// null is none).
func stringMember(data []byte, name string) (string, bool) {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(data, &v); err != nil {
		return "", false
	}
	var s *string
	if raw, ok := v[name]; !ok || json.Unmarshal(raw, &s) != nil || s == nil {
		return "", false
	}
	return *s, true
}
