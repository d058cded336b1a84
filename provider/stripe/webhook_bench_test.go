package stripe

import (
	"testing"
	"time"

	"github.com/retrysafe/booking/provider"
)

// benchPI is a payment_intent as Stripe renders it in a webhook
// (https://docs.stripe.com/api/payment_intents/object): the size and
// nesting of the body each booking's payment_intent.succeeded carries.
const benchPI = `{"id":"pi_3QbC9d2eZvKYlo2C1a2b3c4d","object":"payment_intent","amount":4200,"amount_capturable":0,` +
	`"amount_details":{"tip":{}},"amount_received":4200,"application":null,"application_fee_amount":null,` +
	`"automatic_payment_methods":null,"canceled_at":null,"cancellation_reason":null,"capture_method":"automatic",` +
	`"client_secret":"pi_3QbC9d2eZvKYlo2C1a2b3c4d_secret_abcdefghijklmnopqrstu","confirmation_method":"automatic",` +
	`"created":1961841600,"currency":"eur","customer":null,"description":null,"invoice":null,"last_payment_error":null,` +
	`"latest_charge":"ch_3QbC9d2eZvKYlo2C1x2y3z4w","livemode":false,` +
	`"metadata":{"order_id":"0193f6c2-7d1e-7a3b-9c4d-5e6f7a8b9c0d","attempt":"1","deployment":"prod-eu"},` +
	`"next_action":null,"on_behalf_of":null,"payment_method":"pm_1QbC9d2eZvKYlo2CabcdEFGH",` +
	`"payment_method_configuration_details":null,"payment_method_options":{"card":{"installments":null,"mandate_options":null,` +
	`"network":null,"request_three_d_secure":"automatic"}},"payment_method_types":["card"],"processing":null,` +
	`"receipt_email":null,"review":null,"setup_future_usage":null,"shipping":null,"source":null,` +
	`"statement_descriptor":null,"statement_descriptor_suffix":null,"status":"succeeded","transfer_data":null,"transfer_group":null}`

// BenchmarkParseWebhook verifies and decodes one payment_intent.succeeded
// delivery signed with the second of two secrets (a rotation).
func BenchmarkParseWebhook(b *testing.B) {
	c := mustWebhookClient(b, Config{WebhookSecrets: []string{"whsec_old", "whsec_new"}})
	body := eventBody(provider.EventPaymentIntentSucceeded, APIVersion, benchPI)
	header := sign(body, signedAt, "whsec_new")
	now := signedAt.Add(time.Minute)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := c.ParseWebhook(body, header, now); err != nil {
			b.Fatal(err)
		}
	}
}
