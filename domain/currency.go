package domain

import (
	"fmt"
	"strings"
)

// chargeable holds the currencies a price may be set in: the active ISO 4217
// codes (https://www.iso.org/iso-4217-currency-codes.html, list one) that
// Stripe takes card payments in (its presentment currencies,
// https://docs.stripe.com/currencies). Left out on purpose: the codes that
// are not money one can charge (XXX "no currency", XTS the test code, the
// precious metals XAU, XAG, XPT, XPD, the funds codes such as XDR, USN or
// CLF), withdrawn codes (EEK, HRK, LTL, LVL, MRO, SLL, STD, VEF, and, since
// their euro and Caribbean-guilder changeovers, BGN and ANG), and active
// codes Stripe does not present cards in (MRU, STN, ZWG and others).
var chargeable = codeSet(`
	AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BHD BIF BMD BND BOB BRL BSD BWP BYN BZD
	CAD CDF CHF CLP CNY COP CRC CVE CZK DJF DKK DOP DZD EGP ETB EUR FJD FKP GBP GEL GIP GMD
	GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR ISK JMD JOD JPY KES KGS KHR KMF KRW KWD KYD KZT
	LAK LBP LKR LRD LSL MAD MDL MGA MKD MMK MNT MOP MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK
	NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SEK SGD SHP SLE
	SOS SRD SZL THB TJS TND TOP TRY TTD TWD TZS UAH UGX USD UYU UZS VES VND VUV WST XAF XCD
	XCG XOF XPF YER ZAR ZMW`)

// threeDecimal holds the chargeable currencies whose minor unit is a
// thousandth. Stripe takes card payments in them only in amounts whose last
// digit is 0 (https://docs.stripe.com/currencies#three-decimal).
var threeDecimal = codeSet("BHD JOD KWD OMR TND")

func codeSet(codes string) map[string]bool {
	set := map[string]bool{}
	for _, c := range strings.Fields(codes) {
		set[c] = true
	}
	return set
}

// IsChargeable reports whether code names a currency a price may be set in:
// an active ISO 4217 code, in upper case, that card payments are taken in
// (EUR, USD, JPY, VES; not eur, XXX, XAU, XTS or the withdrawn HRK).
func IsChargeable(code string) bool { return chargeable[code] }

// CheckPrice returns nil if m can be charged by card: its currency
// IsChargeable and, for a three-decimal currency (BHD, JOD, KWD, OMR, TND),
// its amount is a multiple of 10 minor units. Otherwise it returns an
// Invalid error naming field+".currency" or field+".amount". The amount's
// range is the caller's rule.
func CheckPrice(field string, m Money) error {
	if !IsChargeable(m.Currency) {
		return invalidField(field+".currency", field+".currency must be an active ISO 4217 code, in upper case, of a currency that card payments are taken in, such as EUR")
	}
	if threeDecimal[m.Currency] && m.Amount%10 != 0 {
		return invalidField(field+".amount", fmt.Sprintf("%s.amount must be a multiple of 10 in %s: card payments in a three-decimal currency end in 0", field, m.Currency))
	}
	return nil
}
