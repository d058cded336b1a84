package domain_test

import (
	"time"

	"github.com/retrysafe/booking/domain"
)

// Fixtures of the aggregate tests (the golden events keep literals of their
// own in events_test.go, so a change here never touches a golden file).
const (
	// Fixtures of the show tests. showNow is the decision time; the show starts
	// two days later.
	fixShowID = "01973a2e-6f00-7a1c-9b2d-3e4f5a6b7c01"
	fixResA   = "01973a2f-1200-7b3d-8c4e-5f6a7b8c9d0a"
	fixResB   = "01973a2f-1200-7b3d-8c4e-5f6a7b8c9d0b"
	fixResC   = "01973a2f-1200-7b3d-8c4e-5f6a7b8c9d0c"
	fixActor  = "user-alice"
	fixIntent = "intent-5b1f0c3ad7e94c2b8f6a1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b"

	// Fixtures of the reservation tests: fixResA of fixActor holds 2 seats of
	// the fixture show until resExpiresAt.
	fixOrderA    = "01973a30-4400-7c5e-9d6f-7a8b9c0d1e0a"
	fixOrderB    = "01973a30-4400-7c5e-9d6f-7a8b9c0d1e0b"
	fixIntentB   = "intent-0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
	fixOtherUser = "user-mallory"

	// Fixtures of the intent tests: an intent recorded at intentRecordedAt with
	// fingerprint fixFP and its executor's lease until intentLease.
	fixFP      = "3f0c2a9d5b7e41c68a2d0f9e7b5c3a1d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b"
	fixOtherFP = "a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5"

	// Fixtures of the order tests: order ordID of ordActor, 2 seats for
	// ordAmount, placed at ordNow with a payment deadline 15 minutes later.
	ordID       = "01973b00-0000-7000-8000-00000000a001"
	ordResID    = "01973b00-0000-7000-8000-00000000b001"
	ordShowID   = "01973b00-0000-7000-8000-00000000c001"
	ordActor    = "user-olga"
	ordIntent   = "intent-ord"
	ordOwnerA   = "executor-a"
	ordOwnerB   = "executor-b"
	ordCharge1  = "ch_first"
	ordCharge2  = "ch_second"
	ordRefundID = "re_first"
)

var (
	showNow   = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	showStart = showNow.Add(48 * time.Hour)
	showPrice = domain.Money{Amount: 2500, Currency: "EUR"}

	resExpiresAt = showNow.Add(15 * time.Minute)
	resAmount    = domain.Money{Amount: 5000, Currency: "EUR"}

	intentRecordedAt = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	intentLease      = intentRecordedAt.Add(30 * time.Second)
	intentRetention  = 24 * time.Hour

	ordNow      = time.Date(2030, 7, 1, 10, 0, 0, 0, time.UTC)
	ordDeadline = ordNow.Add(15 * time.Minute)
	ordShowAt   = ordNow.Add(48 * time.Hour)
	ordAmount   = domain.Money{Amount: 3000, Currency: "EUR"}
	ordLease    = 30 * time.Second
	ordSettle   = 5 * time.Second
	ordTickets  = []string{"t-1", "t-2"}
)
