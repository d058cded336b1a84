package providersim

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Error types and codes of Stripe's API (https://docs.stripe.com/api/errors,
// https://docs.stripe.com/error-codes) that the simulator answers.
const (
	typeInvalidRequest = "invalid_request_error"
	typeCard           = "card_error"
	typeAPI            = "api_error"
	typeIdempotency    = "idempotency_error"

	codeParameterMissing         = "parameter_missing"
	codeParameterInvalidInteger  = "parameter_invalid_integer"
	codeResourceMissing          = "resource_missing"
	codeCardDeclined             = "card_declined"
	codeIdempotencyKeyInUse      = "idempotency_key_in_use"
	codeUnexpectedState          = "payment_intent_unexpected_state"
	codeAuthenticationFailure    = "payment_intent_authentication_failure"
	codeChargeAlreadyRefunded    = "charge_already_refunded"
	codeAmountTooLarge           = "amount_too_large"
	declineCodeGeneric           = "generic_decline"
	declineMessage               = "Your card was declined."
	authenticationFailureMessage = "The provided PaymentMethod has failed authentication. You can provide payment_method_data or a new PaymentMethod to attempt to fulfill this PaymentIntent again."
)

// Messages of the simulator's own 5xx answers.
const (
	unknownErrorMessage = "An unknown error occurred while processing the request."
	closingMessage      = "The simulator is shutting down; the request was not executed."
	notSavedMessage     = "An error occurred while saving the request; it was not executed."
)

// apiError is an error answer: its status and Stripe's error object.
type apiError struct {
	status int
	obj    ErrorObject
}

// body returns the answer's bytes: {"error":{…}}.
func (e *apiError) body() []byte {
	return encodeJSON(struct {
		Error ErrorObject `json:"error"`
	}{e.obj})
}

func serverError(status int, message string) *apiError {
	return &apiError{status: status, obj: ErrorObject{Type: typeAPI, Message: message}}
}

func notFound(param, object, id string) *apiError {
	return &apiError{status: http.StatusNotFound, obj: ErrorObject{
		Type: typeInvalidRequest, Code: codeResourceMissing, Param: param,
		Message: "No such " + object + ": '" + id + "'",
	}}
}

func encodeJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("providersim: encode: " + err.Error())
	}
	return b
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeJSON(w http.ResponseWriter, status int, v any) { writeRaw(w, status, encodeJSON(v)) }

func writeError(w http.ResponseWriter, e *apiError) { writeRaw(w, e.status, e.body()) }

// dropConnection closes the connection without an answer, as a network
// failure after the provider committed would.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): abort the response instead.
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}
