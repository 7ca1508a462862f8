package sqlite

import (
	"context"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// CreateSegment implements store.Store.
func (s *Store) CreateSegment(ctx context.Context, name string) error {
	err := s.exec(ctx, nil, "INSERT INTO segments (name) VALUES (?)", name)
	if isUniqueViolation(err) {
		return store.Exists("segment", name)
	}
	return err
}

// DeleteSegment implements store.Store.
func (s *Store) DeleteSegment(ctx context.Context, name string) error {
	return s.exec(ctx, store.NotFound("segment", name), "DELETE FROM segments WHERE name = ?", name)
}

// ListSegments implements store.Store.
func (s *Store) ListSegments(ctx context.Context) ([]store.Segment, error) {
	segs, err := queryAll(ctx, s, "SELECT name FROM segments ORDER BY name", nil, func(sc scanner) (store.Segment, error) {
		seg := store.Segment{Links: []store.SegmentLink{}}
		err := sc.Scan(&seg.Name)
		return seg, err
	})
	if err != nil {
		return nil, err
	}
	links, err := queryAll(ctx, s, "SELECT segment, group_a, group_b FROM segment_links ORDER BY segment, group_a, group_b",
		nil, func(sc scanner) (store.SegmentLink, error) {
			var l store.SegmentLink
			err := sc.Scan(&l.Segment, &l.GroupA, &l.GroupB)
			return l, err
		})
	if err != nil {
		return nil, err
	}
	byName := make(map[string]int, len(segs))
	for i, seg := range segs {
		byName[seg.Name] = i
	}
	for _, l := range links {
		if i, ok := byName[l.Segment]; ok {
			segs[i].Links = append(segs[i].Links, l)
		}
	}
	return segs, nil
}

// AddSegmentLink implements store.Store.
func (s *Store) AddSegmentLink(ctx context.Context, l store.SegmentLink) error {
	l = store.NewSegmentLink(l.Segment, l.GroupA, l.GroupB)
	return s.inTx(ctx, func(tx querier) error {
		var one int
		err := tx.QueryRowContext(ctx, "SELECT 1 FROM segments WHERE name = ?", l.Segment).Scan(&one)
		if isNoRows(err) {
			return store.NotFound("segment", l.Segment)
		}
		if err != nil {
			return wrap(err)
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO segment_links (segment, group_a, group_b) VALUES (?, ?, ?)",
			l.Segment, l.GroupA, l.GroupB)
		if isUniqueViolation(err) {
			return store.Exists("segment link", l.GroupA+"-"+l.GroupB)
		}
		return wrap(err)
	})
}

// RemoveSegmentLink implements store.Store.
func (s *Store) RemoveSegmentLink(ctx context.Context, l store.SegmentLink) error {
	l = store.NewSegmentLink(l.Segment, l.GroupA, l.GroupB)
	return s.inTx(ctx, func(tx querier) error {
		var one int
		err := tx.QueryRowContext(ctx, "SELECT 1 FROM segments WHERE name = ?", l.Segment).Scan(&one)
		if isNoRows(err) {
			return store.NotFound("segment", l.Segment)
		}
		if err != nil {
			return wrap(err)
		}
		res, err := tx.ExecContext(ctx, "DELETE FROM segment_links WHERE segment = ? AND group_a = ? AND group_b = ?",
			l.Segment, l.GroupA, l.GroupB)
		if err != nil {
			return wrap(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.NotFound("segment link", l.GroupA+"-"+l.GroupB)
		}
		return nil
	})
}
