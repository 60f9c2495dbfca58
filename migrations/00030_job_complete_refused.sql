-- +goose Up
-- A job's success and its effect may commit in one round trip: the
-- worker sends the completion and COMMIT together, without reading the
-- completion's answer first (workers.HandleTx). The completion must then
-- refuse in the server, not in the worker, when the attempt no longer
-- owns the job (a newer attempt took it, or the job left processing):
-- this function raises, the transaction is aborted, and the COMMIT
-- queued behind it rolls back, effect included. SQLSTATE IG001 is
-- idemgate's own, so the worker tells this refusal from any other error.
-- +goose StatementBegin
CREATE FUNCTION job_complete_refused(tenant text, key text, token bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'job % of tenant "%": fencing token % no longer owns the attempt', key, tenant, token
        USING ERRCODE = 'IG001';
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION job_complete_refused(text, text, bigint);
