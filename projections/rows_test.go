package projections

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestTextArrayEncodesAsTextSlice checks that a *textArray parameter is
// sent as the same bytes as the []pgtype.Text it holds, in both formats
// (NULL elements, empty strings, quotes, backslashes, commas, braces and
// non-ASCII text included), so the server stores the same values.
func TestTextArrayEncodesAsTextSlice(t *testing.T) {
	vals := []pgtype.Text{txt("a"), {}, txt(""), txt(`say "hi", \ {x}`), txt("NULL"), txt("été 🎭"), txtInt(-42), txt(" padded ")}
	for _, n := range []int{1, 2, len(vals)} {
		for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
			want, err := pgtype.NewMap().Encode(pgtype.TextArrayOID, format, vals[:n], nil)
			if err != nil {
				t.Fatal(err)
			}
			a := newTextArray(vals[:n])
			got, err := pgtype.NewMap().Encode(pgtype.TextArrayOID, format, &a, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%d elements, format %d: encoded %q, want %q", n, format, got, want)
			}
		}
	}
}

// TestTextArrayEncodesAsTextSliceForUnknownType checks the encoding where
// the parameter's type is unknown (OID 0, as the simple protocol and
// QueryExecModeExec encode parameters) in both formats, and the empty
// array at both OIDs: the same bytes as the []pgtype.Text.
func TestTextArrayEncodesAsTextSliceForUnknownType(t *testing.T) {
	vals := []pgtype.Text{txt("a"), {}, txt(""), txt(`say "hi", \ {x}`), txt("NULL"), txt("été 🎭")}
	cases := []struct {
		oid  uint32
		vals []pgtype.Text
	}{
		{0, vals[:1]}, {0, vals}, {0, vals[:0]}, {pgtype.TextArrayOID, vals[:0]},
	}
	for _, c := range cases {
		for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
			want, err := pgtype.NewMap().Encode(c.oid, format, c.vals, nil)
			if err != nil {
				t.Fatal(err)
			}
			a := newTextArray(c.vals)
			got, err := pgtype.NewMap().Encode(c.oid, format, &a, nil)
			if err != nil {
				t.Fatalf("OID %d, %d elements, format %d: %v", c.oid, len(c.vals), format, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("OID %d, %d elements, format %d: encoded %q, want %q", c.oid, len(c.vals), format, got, want)
			}
		}
	}
}
