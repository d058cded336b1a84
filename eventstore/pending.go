package eventstore

// PendingRule says which streams of a category still need work, for the
// query that finds them (logindex.Index.Pending): a
// stream whose name begins with Category is pending while it has no event
// of a type in Ends, and, ended or not, while an obligation of Owed is
// open. The rule names event types and data members only as its caller
// passes them, so the event store knows nothing of the events it stores
// (the service passes its domain's order rule).
type PendingRule struct {
	Category string
	Ends     []string
	Owed     []Obligation
}

// Obligation is work that events of a stream open and later close, each
// naming it by a string member of its JSON data: the events of types Opens
// open the one their member OpenMember names, those of types Closes close
// the one CloseMember names. An event without the member, or with JSON
// null there, names none. An obligation is open while some name opened is
// not closed.
type Obligation struct {
	Opens       []string
	OpenMember  string
	Closes      []string
	CloseMember string
}
