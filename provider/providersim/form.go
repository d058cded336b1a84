package providersim

import (
	"crypto/sha256"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/retrysafe/booking/provider"
)

// Stripe's API takes application/x-www-form-urlencoded parameters, with
// brackets for hashes and arrays (https://docs.stripe.com/api/request_ids,
// https://docs.stripe.com/api/metadata): metadata[order_id]=o1,
// automatic_payment_methods[enabled]=true, expand[]=latest_charge or
// expand[0]=latest_charge, created[gte]=1767225600. POST parameters come
// in the body, GET parameters in the query string. A parameter the
// endpoint does not know is refused as Stripe refuses it: 400
// invalid_request_error, code parameter_unknown, naming it.

// spec lists the parameters of an endpoint.
type spec struct {
	scalars map[string]bool            // name=value
	hashes  map[string]map[string]bool // name[sub]=value; a nil sub-set accepts any sub key (metadata)
	arrays  map[string]bool            // name[]=value or name[i]=value
}

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// params are an endpoint's parsed parameters.
type params struct {
	scalar map[string]string
	hash   map[string]map[string]string
	array  map[string][]string
	// canonical is the parameters sorted and with array indices
	// normalized: two requests with equal canonical forms have equal
	// parameters, whatever their order or array notation.
	canonical string
}

// fingerprint is what an idempotency key's first request is compared
// with: the endpoint and the canonical parameters.
func (p params) fingerprint(endpoint string) [32]byte {
	return sha256.Sum256([]byte(endpoint + "\x00" + p.canonical))
}

var bracketKey = regexp.MustCompile(`^([a-z_]+)(?:\[([^\[\]]*)\])?$`)

// parseParams parses encoded form values against sp.
func parseParams(values url.Values, sp spec) (params, *apiError) {
	p := params{scalar: map[string]string{}, hash: map[string]map[string]string{}, array: map[string][]string{}}
	indexed := map[string]map[int]string{}
	canon := url.Values{}
	for _, key := range slices.Sorted(maps.Keys(values)) {
		vals := values[key]
		m := bracketKey.FindStringSubmatch(key)
		if m == nil {
			return p, unknownParam(key)
		}
		name, sub, bracketed := m[1], m[2], strings.Contains(key, "[")
		switch {
		case !bracketed && sp.scalars[name]:
			if len(vals) != 1 {
				return p, invalidParam(key, "", fmt.Sprintf("Received repeated parameter: %s", key))
			}
			p.scalar[name] = vals[0]
			canon.Set(key, vals[0])
		case !bracketed && name == "metadata" && inHashes(sp, name):
			// metadata= (empty) is Stripe's way to send an empty hash.
			if len(vals) != 1 || vals[0] != "" {
				return p, invalidParam(key, "", "Invalid hash")
			}
		case bracketed && sp.arrays[name]:
			if sub == "" {
				p.array[name] = append(p.array[name], vals...)
				continue
			}
			i, err := strconv.Atoi(sub)
			if err != nil || i < 0 || len(vals) != 1 {
				return p, invalidParam(key, "", "Invalid array")
			}
			if indexed[name] == nil {
				indexed[name] = map[int]string{}
			}
			indexed[name][i] = vals[0]
		case bracketed && inHashes(sp, name):
			if subs := sp.hashes[name]; sub == "" || subs != nil && !subs[sub] {
				return p, unknownParam(key)
			}
			if len(vals) != 1 {
				return p, invalidParam(key, "", fmt.Sprintf("Received repeated parameter: %s", key))
			}
			if p.hash[name] == nil {
				p.hash[name] = map[string]string{}
			}
			p.hash[name][sub] = vals[0]
			canon.Set(key, vals[0])
		default:
			return p, unknownParam(key)
		}
	}
	for name, byIndex := range indexed {
		for _, i := range slices.Sorted(maps.Keys(byIndex)) {
			p.array[name] = append(p.array[name], byIndex[i])
		}
	}
	for name, vals := range p.array {
		for i, v := range vals {
			canon.Set(name+"["+strconv.Itoa(i)+"]", v)
		}
	}
	p.canonical = canon.Encode()
	return p, nil
}

// inHashes reports whether sp has the hash name.
func inHashes(sp spec, name string) bool {
	_, ok := sp.hashes[name]
	return ok
}

// readParams reads a request's parameters: the query string of a GET, the
// form body of a POST. A POST body must be form encoded (an empty one is
// accepted); a query string on a POST is refused like an unknown
// parameter.
func readParams(w http.ResponseWriter, r *http.Request, sp spec) (params, *apiError) {
	if r.Method != http.MethodPost {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			return params{}, invalidParam("", "", "The query string could not be parsed: "+err.Error())
		}
		return parseParams(q, sp)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		return params{}, invalidParam("", "", "The request body could not be read.")
	}
	if len(body) > 0 {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/x-www-form-urlencoded" {
			return params{}, invalidParam("", "", "Invalid request: the body must be application/x-www-form-urlencoded, as Stripe's API takes it.")
		}
	}
	values, err := url.ParseQuery(string(body))
	if err != nil {
		return params{}, invalidParam("", "", "The request body could not be parsed: "+err.Error())
	}
	if r.URL.RawQuery != "" {
		q, _ := url.ParseQuery(r.URL.RawQuery)
		for k := range q {
			return params{}, unknownParam(k)
		}
	}
	return parseParams(values, sp)
}

// unknownParam is Stripe's answer to a parameter the endpoint does not have.
func unknownParam(key string) *apiError {
	return &apiError{status: http.StatusBadRequest, obj: ErrorObject{
		Type: typeInvalidRequest, Code: provider.CodeParameterUnknown, Param: key,
		Message: "Received unknown parameter: " + key,
	}}
}

// invalidParam is a 400 invalid_request_error about param.
func invalidParam(param, code, message string) *apiError {
	return &apiError{status: http.StatusBadRequest, obj: ErrorObject{Type: typeInvalidRequest, Code: code, Param: param, Message: message}}
}

// missingParam is Stripe's answer to a required parameter left out.
func missingParam(param string) *apiError {
	return invalidParam(param, codeParameterMissing, "Missing required param: "+param+".")
}

// intParam returns the integer scalar name (ok false when absent), or a
// 400 parameter_invalid_integer.
func (p params) intParam(name string) (n int64, ok bool, e *apiError) {
	v, ok := p.scalar[name]
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, true, invalidParam(name, codeParameterInvalidInteger, "Invalid integer: "+v)
	}
	return n, true, nil
}

// boolValue parses a boolean parameter value as Stripe does ("true" or
// "false"); param names it in the error.
func boolValue(param, v string) (bool, *apiError) {
	switch v {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, invalidParam(param, "", "Invalid boolean: "+v)
}

// enumValue checks that v is one of allowed.
func enumValue(param, v string, allowed ...string) *apiError {
	if slices.Contains(allowed, v) {
		return nil
	}
	return invalidParam(param, "", fmt.Sprintf("Invalid %s: must be one of %s", param, strings.Join(allowed, ", ")))
}

// metadataParam returns the metadata hash, checked against Stripe's
// limits (https://docs.stripe.com/api/metadata): at most 50 keys of at
// most 40 characters, values of at most 500 characters.
func (p params) metadataParam() (map[string]string, *apiError) {
	md := p.hash["metadata"]
	if len(md) > 50 {
		return nil, invalidParam("metadata", "", "Invalid metadata: you can specify up to 50 keys.")
	}
	out := make(map[string]string, len(md))
	for k, v := range md {
		switch {
		case len(k) > 40:
			return nil, invalidParam("metadata["+k+"]", "", "Invalid metadata: keys can be at most 40 characters long.")
		case len(v) > 500:
			return nil, invalidParam("metadata["+k+"]", "", "Invalid metadata: values can be at most 500 characters long.")
		}
		out[k] = v
	}
	return out, nil
}

// expandParam returns the expand[] values, each of which must be one of
// allowed; Stripe refuses others ("This property cannot be expanded").
func (p params) expandParam(allowed ...string) (map[string]bool, *apiError) {
	out := map[string]bool{}
	for _, e := range p.array["expand"] {
		if !slices.Contains(allowed, e) {
			return nil, invalidParam("expand", "", "This property cannot be expanded ("+e+").")
		}
		out[e] = true
	}
	return out, nil
}
