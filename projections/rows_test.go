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
