package projections

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestProjectorUnderTextParameterExecModes runs live projectors on pools
// whose connections send parameters as text of unknown type: the simple
// protocol and QueryExecModeExec (what a database URL's
// default_query_exec_mode selects, e.g. behind a transaction-pooling
// proxy). The read models come out exact, as with the default mode.
func TestProjectorUnderTextParameterExecModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			db := mustDB(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			workload{shows: 3, perShow: 20, workers: 3, seed: 3}.appendTo(t, ctx, db.fast)
			cfg, err := pgxpool.ParseConfig(db.url)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			ps := All(24 * time.Hour)
			var wg sync.WaitGroup
			for _, p := range ps {
				wg.Go(func() {
					if err := NewProjector(pool, p, WithMaxBatch(7)).Run(ctx, db.store); err != nil && ctx.Err() == nil {
						t.Errorf("projector %s: %v", p.name, err)
						cancel()
					}
				})
			}
			waitCaughtUp(t, ctx, db, ps)
			cancel()
			wg.Wait()
			checkModel(t, context.Background(), db)
		})
	}
}
