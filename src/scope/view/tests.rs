//! The views alone, without an engine: what their guards reach, and that
//! tiles cut from one matrix are disjoint. Run under Miri (`.ci/run`),
//! which checks every pointer made here against the borrow it came from.

use super::*;

#[test]
fn a_ref_view_reaches_its_value() {
    let mut x = 5u64;
    {
        // SAFETY: `x` outlives the view and nothing else reaches it meanwhile.
        let mut view = unsafe { RefView::new(&mut x) };
        *view.target_mut() += 1;
        assert_eq!(*view.target(), 6);
    }
    assert_eq!(x, 6);
}

#[test]
fn a_slice_view_reaches_its_elements() {
    let mut data = vec![1u32, 2, 3];
    {
        // SAFETY: as above.
        let mut view = unsafe { SliceView::new(&mut data) };
        view.target_mut().iter_mut().for_each(|x| *x *= 10);
        assert_eq!(view.target(), [10, 20, 30]);
    }
    assert_eq!(data, [10, 20, 30]);
}

/// Four tiles of a 4 × 4 matrix, all written at once through their own
/// `Tile`s, each row slice held while the others are written: the tiles
/// and their rows are disjoint.
#[test]
fn tiles_of_one_matrix_are_disjoint() {
    let mut m: Vec<u32> = (0..16).collect();
    {
        let base = NonNull::from(&mut m[..]).cast::<u32>();
        // SAFETY: each tile is 2 rows of 2 inside the 4 × 4 matrix, rows 4
        // apart, and no two overlap; `m` is not touched until they are gone.
        let mut views: Vec<TileView<u32>> = [(0, 0), (0, 2), (2, 0), (2, 2)]
            .into_iter()
            .map(|(r, c)| unsafe { TileView::new(base.add(r * 4 + c), 2, 2, 4) })
            .collect();
        let mut tiles: Vec<&mut Tile<u32>> = views.iter_mut().map(View::target_mut).collect();
        let mut rows: Vec<&mut [u32]> = Vec::new();
        for (k, tile) in tiles.iter_mut().enumerate() {
            assert_eq!((tile.nrows(), tile.ncols()), (2, 2));
            tile[(1, 1)] += 100 * k as u32;
            rows.extend(tile.rows_mut());
        }
        for row in &mut rows {
            row.iter_mut().for_each(|x| *x += 1000);
        }
        drop(rows);
        drop(tiles);
        assert_eq!(views[3].target().row(0), [1010, 1011]);
        assert_eq!(format!("{:?}", views[3].target()), "Tile(2 x 2)");
    }
    assert_eq!(m[5], 1005);
    assert_eq!(m[15], 1315);
    assert_eq!(m[0], 1000);
}

#[test]
fn a_tile_row_out_of_range_panics() {
    let mut m = [0u8; 4];
    let base = NonNull::from(&mut m[..]).cast::<u8>();
    // SAFETY: one tile of 2 × 2, the whole matrix.
    let view = unsafe { TileView::new(base, 2, 2, 2) };
    let tile = view.target();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tile.row(2).len()));
    assert!(caught.is_err());
}
