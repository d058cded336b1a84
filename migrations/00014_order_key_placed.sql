-- The key-table step of the unit of work that places an order
-- (commands/keys.go, Keys.Placed in one transaction with OrderPlaced): the
-- order stream carries the sealed token from then on, so the key table drops
-- it and makes the key due at the payment deadline, unless it was due
-- earlier. A key that is gone (deleted since the intent was recorded) raises
-- SQLSTATE KY404, which rolls the whole unit back: the order is then placed
-- on reads, without a token.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION order_key_placed(p_order_id uuid, p_deadline timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE order_keys SET held_token = NULL, shred_at = least(shred_at, p_deadline)
    WHERE order_id = p_order_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'order_key_placed: order % has no key', p_order_id USING ERRCODE = 'KY404';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION order_key_placed(uuid, timestamptz);
