//! Vars over memory the caller owns, for the length of a scope, in the
//! shape of `std::thread::scope`: [`scope`] lends the engine views of the
//! caller's data (a value, a slice, disjoint chunks, the tiles of a
//! matrix) as vars, and returns only once every op that used them has
//! completed and every guard on them is gone, panics included. No copy in
//! or out.

// For maintainers: `README.md` beside this file has the argument. `unsafe`
// here makes the views (`view.rs`): what keeps them valid is this file's end
// of a scope, whose reliance on the var gate the loom model
// `loom_a_scope_end_follows_every_op_on_its_var`
// (`var/var_cell/loom_tests.rs`) checks.

#![allow(unsafe_code)]

mod guard;
mod view;

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr::NonNull;
use std::sync::Mutex;

#[doc(hidden)]
pub use guard::HeldView;
pub use guard::{ScopedReadGuard, ScopedWriteGuard};
pub use view::{RefView, SliceView, Tile, TileView, View};

use crate::engine::Engine;
use crate::error::Error;
use crate::may_block::{Instead, refuse_blocking};
use crate::op::access::{AsVar, VarToken, sealed};
use crate::var::Var;

/// Runs `f` with a [`Scope`] whose vars borrow the caller's memory, and
/// returns what `f` returns once every op and every guard on those vars
/// is gone (also when `f` panics: the panic goes on then).
///
/// The vars are ordinary vars to the engine: ops declare them with
/// `read`/`write`, conflicting ops take effect in push order, and a body's
/// guard reaches exactly the part of the memory its var views. Their
/// handles cannot leave `f` (a handle that outlives the scope does not
/// compile), and the memory is the caller's again when `scope` returns.
///
/// # Errors
///
/// [`Error::is_blocking_in_runtime`] in an async task (a thread that runs
/// a Tokio runtime's tasks), where waiting at the end would stall them:
/// `f` is not run then. There is no async form (a future that borrows
/// could be forgotten while the engine still writes the memory): from async
/// code, call it inside `tokio::task::spawn_blocking` (below) or
/// `tokio::task::block_in_place`; plain threads call it directly.
///
/// # Examples
///
/// ```
/// let engine = depengine::Engine::new();
/// let mut data = vec![1.0f64; 1000];
/// depengine::scope(&engine, |s| {
///     for chunk in s.chunks(&mut data, 250) {
///         engine.op("double").write(&chunk).run_detached(|(), (mut c,)| {
///             c.iter_mut().for_each(|x| *x *= 2.0);
///             Ok(())
///         })?;
///     }
///     Ok::<(), depengine::Error>(())
/// })??;
/// // Every op has run: the data is back, changed in place.
/// assert!(data.iter().all(|&x| x == 2.0));
/// # Ok::<(), depengine::Error>(())
/// ```
///
/// From async code, in `spawn_blocking` (the closure owns what it
/// borrows from, and hands it back):
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let engine = depengine::Engine::new();
/// let data = tokio::task::spawn_blocking(move || {
///     let mut data = vec![1u32; 64];
///     depengine::scope(&engine, |s| {
///         let v = s.slice(&mut data);
///         engine.op("triple").write(&v).run_detached(|(), (mut d,)| {
///             d.iter_mut().for_each(|x| *x *= 3);
///             Ok(())
///         })
///     })??;
///     Ok::<_, depengine::Error>(data)
/// })
/// .await??;
/// assert!(data.iter().all(|&x| x == 3));
/// # Ok(())
/// # }
/// ```
///
/// A handle cannot outlive its scope:
///
/// ```compile_fail
/// let engine = depengine::Engine::new();
/// let mut data = vec![0u8; 8];
/// let mut kept = None;
/// depengine::scope(&engine, |s| {
///     kept = Some(s.slice(&mut data)); // error: the handle would outlive the scope
/// }).unwrap();
/// ```
///
/// Nor can the memory be used while the scope has it:
///
/// ```compile_fail
/// let engine = depengine::Engine::new();
/// let mut data = vec![0u8; 8];
/// depengine::scope(&engine, |s| {
///     let v = s.slice(&mut data);
///     data[0] = 1; // error: `data` is borrowed by the scope
///     drop(v);
/// }).unwrap();
/// ```
pub fn scope<'env, F, R>(engine: &'env Engine, f: F) -> Result<R, Error>
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
{
    refuse_blocking("depengine::scope", Instead::SpawnBlocking)?;
    let scope = Scope { engine, ends: Mutex::new(Vec::new()), _scope: PhantomData, _env: PhantomData };
    let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    scope.end();
    match result {
        Ok(value) => Ok(value),
        Err(payload) => resume_unwind(payload),
    }
}

/// A scope of [`scope`]: makes vars over memory borrowed for `'env`, whose
/// handles live for `'scope`.
///
/// # Examples
///
/// ```
/// let engine = depengine::Engine::new();
/// let (mut a, mut b) = (1u64, 2u64);
/// depengine::scope(&engine, |s| {
///     let (a, b) = (s.var(&mut a), s.var(&mut b));
///     engine.op("a += b").read(&b).write(&a).run(|(b,), (mut a,)| { *a += *b; Ok(()) });
/// })?;
/// assert_eq!(a, 3); // every op of the scope has completed
/// # Ok::<(), depengine::Error>(())
/// ```
pub struct Scope<'scope, 'env: 'scope> {
    engine: &'env Engine,
    /// What the end must wait for: one entry per var made.
    ends: Mutex<Vec<Box<dyn Ending>>>,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// A var of a [`Scope`]: declare it in ops as any var (`read`, `write`,
/// `read_all`, `write_all`, `wait_for_var`); its guards reach the view
/// `D` of the borrowed memory. It cannot outlive its scope.
///
/// # Examples
///
/// ```
/// let engine = depengine::Engine::new();
/// let mut counts = vec![0u32; 4];
/// depengine::scope(&engine, |s| {
///     let v = s.slice(&mut counts);
///     engine.op("bump").write(&v).run(|(), (mut c,)| { c.iter_mut().for_each(|x| *x += 1); Ok(()) });
///     engine.wait_for_var(&v); // a scoped var is waited for as any var
/// })?;
/// assert_eq!(counts, [1; 4]);
/// # Ok::<(), depengine::Error>(())
/// ```
pub struct ScopedVar<'scope, D> {
    var: Var<D>,
    _scope: PhantomData<&'scope ()>,
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// A var over `value`.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let mut total = 0u64;
    /// depengine::scope(&engine, |s| {
    ///     let t = s.var(&mut total);
    ///     for i in 1..=4 {
    ///         engine.op("add").write(&t).run(move |(), (mut t,)| { *t += i; Ok(()) });
    ///     }
    /// })?;
    /// assert_eq!(total, 10);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn var<T: Send + Sync + 'static>(&'scope self, value: &'env mut T) -> ScopedVar<'scope, RefView<T>> {
        // SAFETY: `value` is borrowed exclusively for `'env`, which outlives
        // the scope, and the scope's end outlasts every use of the view
        // (README.md beside this file).
        self.make("scoped var", unsafe { RefView::new(value) })
    }

    /// A var over `data`.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let mut data = vec![1.0f32; 8];
    /// depengine::scope(&engine, |s| {
    ///     let d = s.slice(&mut data);
    ///     engine.op("scale").write(&d).run(|(), (mut d,)| { d.iter_mut().for_each(|x| *x *= 3.0); Ok(()) });
    /// })?;
    /// assert_eq!(data, [3.0; 8]);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn slice<T: Send + Sync + 'static>(
        &'scope self,
        data: &'env mut [T],
    ) -> ScopedVar<'scope, SliceView<T>> {
        // SAFETY: as for `var`.
        self.make("scoped slice", unsafe { SliceView::new(data) })
    }

    /// A var over each chunk of `size` elements of `data` (the last one
    /// shorter when `size` does not divide the length), in order.
    ///
    /// # Panics
    ///
    /// `size` is 0 (as `chunks_mut`).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let mut data: Vec<u32> = (0..10).collect();
    /// depengine::scope(&engine, |s| {
    ///     for chunk in s.chunks(&mut data, 4) { // 4, 4 and 2 elements, in parallel
    ///         engine.op("double").write(&chunk).run(|(), (mut c,)| { c.iter_mut().for_each(|x| *x *= 2); Ok(()) });
    ///     }
    /// })?;
    /// assert_eq!(data, (0..10).map(|x| x * 2).collect::<Vec<_>>());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn chunks<T: Send + Sync + 'static>(
        &'scope self,
        data: &'env mut [T],
        size: usize,
    ) -> Vec<ScopedVar<'scope, SliceView<T>>> {
        data.chunks_mut(size)
            .enumerate()
            // SAFETY: as for `var`; `chunks_mut` gives disjoint chunks.
            .map(|(i, chunk)| self.make(format!("chunk {i}"), unsafe { SliceView::new(chunk) }))
            .collect()
    }

    /// A var over each tile of the row-major matrix `data` of `cols`
    /// columns: tiles of `tile_rows` × `tile_cols` elements (smaller at the
    /// bottom and right edges when they do not divide the matrix), as
    /// `tiles[i][j]`, tile row `i`, tile column `j`. Rows of a tile are
    /// contiguous and keep the alignment the caller gave the matrix (a row
    /// starts at `data[r * cols + c0]`).
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_argument`]: a zero dimension, or a length that
    /// is not a whole number of rows.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let mut m = vec![0u32; 4 * 6]; // 4 rows of 6
    /// depengine::scope(&engine, |s| {
    ///     let tiles = s.tiles(&mut m, 6, 2, 3)?; // 2 x 2 tiles of 2 x 3
    ///     for (i, row) in tiles.iter().enumerate() {
    ///         for (j, tile) in row.iter().enumerate() {
    ///             let id = (10 * i + j) as u32;
    ///             engine.op("fill").write(tile).run(move |(), (mut t,)| {
    ///                 t.rows_mut().for_each(|r| r.fill(id));
    ///                 Ok(())
    ///             });
    ///         }
    ///     }
    ///     Ok::<(), depengine::Error>(())
    /// })??;
    /// assert_eq!(&m[..6], [0, 0, 0, 1, 1, 1]);
    /// assert_eq!(&m[18..], [10, 10, 10, 11, 11, 11]);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn tiles<T: Send + Sync + 'static>(
        &'scope self,
        data: &'env mut [T],
        cols: usize,
        tile_rows: usize,
        tile_cols: usize,
    ) -> Result<Vec<Vec<ScopedVar<'scope, TileView<T>>>>, Error> {
        if cols == 0 || tile_rows == 0 || tile_cols == 0 || !data.len().is_multiple_of(cols) {
            return Err(Error::invalid(format!(
                "tiles of {tile_rows} x {tile_cols} of a matrix of {} elements in rows of {cols}",
                data.len()
            )));
        }
        let rows = data.len() / cols;
        // One raw pointer to the whole matrix, from which every tile is
        // cut: no two tiles' pointers come from overlapping borrows.
        let base = NonNull::from(data).cast::<T>();
        let grid = |n: usize, t: usize| (0..n.div_ceil(t)).map(move |k| (k * t, t.min(n - k * t)));
        let tiles = grid(rows, tile_rows)
            .enumerate()
            .map(|(i, (r0, tr))| {
                grid(cols, tile_cols)
                    .enumerate()
                    .map(|(j, (c0, tc))| {
                        // SAFETY: tile (i, j) is rows `r0..r0 + tr` and
                        // columns `c0..c0 + tc` of the matrix, inside `data`
                        // and apart from every other tile; `data` is
                        // borrowed as for `var`.
                        let view = unsafe { TileView::new(base.add(r0 * cols + c0), tr, tc, cols) };
                        self.make(format!("tile ({i}, {j})"), view)
                    })
                    .collect()
            })
            .collect();
        Ok(tiles)
    }

    fn make<D: Send + Sync + 'static>(
        &'scope self,
        name: impl Into<std::sync::Arc<str>>,
        view: D,
    ) -> ScopedVar<'scope, D> {
        let var = self.engine.var_named(name, view);
        self.ends.lock().unwrap_or_else(|e| e.into_inner()).push(Box::new(var.clone()));
        ScopedVar { var, _scope: PhantomData }
    }

    /// Waits until no op and no guard can reach any of the scope's views:
    /// each var is deleted (the deletion waits for every op pushed before
    /// it), all deletions pushed first so that they wait together.
    fn end(&self) {
        let ends = std::mem::take(&mut *self.ends.lock().unwrap_or_else(|e| e.into_inner()));
        let pending: Vec<_> = ends.into_iter().map(|end| end.delete(self.engine)).collect();
        pending.into_iter().for_each(|p| p.wait());
    }
}

/// A scope's var, as its end sees it.
trait Ending: Send {
    /// Pushes the var's deletion.
    fn delete(self: Box<Self>, engine: &Engine) -> Box<dyn Pending>;
}

/// A deletion pushed.
trait Pending {
    /// Returns once no op and no guard can reach the var's view.
    fn wait(self: Box<Self>);
}

impl<D: Send + Sync + 'static> Ending for Var<D> {
    fn delete(self: Box<Self>, engine: &Engine) -> Box<dyn Pending> {
        let deletion = engine.delete_var(&*self);
        Box::new((*self, deletion))
    }
}

impl<D: Send + Sync + 'static> Pending for (Var<D>, crate::OpHandle<D>) {
    fn wait(self: Box<Self>) {
        let (var, deletion) = *self;
        if deletion.blocking_wait().is_ok() {
            return;
        }
        // Refused or cancelled (a shutdown): the deletion proves nothing,
        // so wait until no op is queued on the var or holds it, and so no
        // guard reaches its view. The engine is closed: no op can be
        // appended after this. (Handles are no measure: an op's handle or
        // record may outlive the scope, holding the var, and never run.)
        while !var.any().is_idle() {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
}

impl<D> sealed::Sealed for ScopedVar<'_, D> {}
impl<D: View> AsVar for ScopedVar<'_, D> {
    type Data = D;
    type Held = HeldView<D>;

    fn as_var(&self, _: VarToken) -> &Var<D> {
        &self.var
    }

    fn held(&self, _: VarToken) -> HeldView<D> {
        HeldView(self.var.clone())
    }
}

impl<D> Clone for ScopedVar<'_, D> {
    fn clone(&self) -> Self {
        Self { var: self.var.clone(), _scope: PhantomData }
    }
}

impl<D: Send + Sync + 'static> std::fmt::Debug for ScopedVar<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ScopedVar").field(&self.var.label()).finish()
    }
}

impl std::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let vars = self.ends.lock().map_or(0, |e| e.len());
        f.debug_struct("Scope").field("vars", &vars).finish_non_exhaustive()
    }
}
