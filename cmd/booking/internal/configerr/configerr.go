// Package configerr is the configuration error of the booking command: every
// refusal of a setting names the environment variable (or flag) at fault, so
// an operator knows what to change without reading the code.
package configerr

import "fmt"

// Error is a refused setting. Its message is
// "invalid configuration: VARIABLE: reason"; the reason never shows the
// value of a secret.
type Error struct {
	// Variable is the environment variable or flag at fault, such as
	// BOOKING_MASTER_KEYS or --durable.
	Variable string
	// Reason says what is wrong and what is wanted.
	Reason string
}

// Error returns "invalid configuration: VARIABLE: reason".
func (e *Error) Error() string {
	return "invalid configuration: " + e.Variable + ": " + e.Reason
}

// New returns an *Error naming variable, with the reason formatted as by
// fmt.Sprintf(format, args...).
func New(variable, format string, args ...any) error {
	return &Error{Variable: variable, Reason: fmt.Sprintf(format, args...)}
}
