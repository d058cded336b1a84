package logindex

import "encoding/json"

// chargeID returns the charge_id member of a refund event's JSON data, if
// it is a string (as PostgreSQL's data ->> 'charge_id' counts it: a missing
// member or JSON null is no charge).
func chargeID(data []byte) (string, bool) {
	var v struct {
		ChargeID *string `json:"charge_id"`
	}
	if err := json.Unmarshal(data, &v); err != nil || v.ChargeID == nil {
		return "", false
	}
	return *v.ChargeID, true
}
