//! The guards of a scope's vars: a var guard over a view, dereferencing to
//! the borrowed elements ([`View::Target`]) and never to the view, so that
//! no safe code can swap a view into another var (of this scope or of
//! another, whose memory is the caller's again sooner).

use std::fmt;
use std::ops::{Deref, DerefMut};

use super::view::View;
use crate::op::access::{Held, OpToken, VarToken, sealed};
use crate::var::{ReadGuard, Var, WriteGuard};

/// Shared access to the memory a scope's var views, for an op that
/// declared a read: dereferences to the borrowed value, slice or
/// [`Tile`](super::Tile).
///
/// # Examples
///
/// ```
/// let engine = depengine::Engine::new();
/// let mut data = vec![1u32, 2, 3];
/// depengine::scope(&engine, |s| {
///     let v = s.slice(&mut data);
///     let sum = engine.op("sum").read(&v).run(|(d,), ()| Ok(d.iter().sum::<u32>()));
///     assert_eq!(sum.blocking_wait()?, 6);
///     Ok::<(), depengine::Error>(())
/// })??;
/// # Ok::<(), depengine::Error>(())
/// ```
pub struct ScopedReadGuard<V>(ReadGuard<V>);

/// Exclusive access to the memory a scope's var views, for an op that
/// declared a write: dereferences to the borrowed value, slice or
/// [`Tile`](super::Tile), so that the elements can be changed but the
/// view cannot be moved (two such guards cannot be swapped with
/// `std::mem::swap`, whose operands must be sized):
///
/// ```compile_fail
/// let engine = depengine::Engine::new();
/// let (mut x, mut y) = (vec![0u8; 4], vec![0u8; 4]);
/// depengine::scope(&engine, |s| {
///     let (a, b) = (s.slice(&mut x), s.slice(&mut y));
///     engine.op("swap").write(&a).write(&b).run(|(), (mut a, mut b)| {
///         std::mem::swap(&mut *a, &mut *b); // error: `[u8]` is not sized
///         Ok(())
///     });
/// })
/// .unwrap();
/// ```
///
/// # Examples
///
/// ```
/// let engine = depengine::Engine::new();
/// let mut data = vec![1u32, 2, 3];
/// depengine::scope(&engine, |s| {
///     let v = s.slice(&mut data);
///     engine.op("double").write(&v).run(|(), (mut d,)| {
///         d.iter_mut().for_each(|x| *x *= 2);
///         Ok(())
///     });
/// })?;
/// assert_eq!(data, [2, 4, 6]);
/// # Ok::<(), depengine::Error>(())
/// ```
pub struct ScopedWriteGuard<V>(WriteGuard<V>);

/// A scope's var as a declared op keeps it until it runs: its guards are
/// the scope's, over the view's elements.
#[doc(hidden)]
#[allow(missing_debug_implementations)]
pub struct HeldView<V>(pub(super) Var<V>);

impl<V> Clone for HeldView<V> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<V: View> sealed::Sealed for HeldView<V> {}
impl<V: View> Held for HeldView<V> {
    type Data = V;
    type ReadGuard = ScopedReadGuard<V>;
    type WriteGuard = ScopedWriteGuard<V>;

    fn var(&self, _: VarToken) -> &Var<V> {
        &self.0
    }

    fn read_guard(self, op: OpToken<'_>) -> ScopedReadGuard<V> {
        ScopedReadGuard(self.0.read_guard(op))
    }

    fn write_guard(self, op: OpToken<'_>) -> ScopedWriteGuard<V> {
        ScopedWriteGuard(self.0.write_guard(op))
    }
}

impl<V: View> Deref for ScopedReadGuard<V> {
    type Target = V::Target;

    fn deref(&self) -> &V::Target {
        self.0.target()
    }
}

impl<V: View> Deref for ScopedWriteGuard<V> {
    type Target = V::Target;

    fn deref(&self) -> &V::Target {
        self.0.target()
    }
}

impl<V: View> DerefMut for ScopedWriteGuard<V> {
    fn deref_mut(&mut self) -> &mut V::Target {
        self.0.target_mut()
    }
}

impl<V: View> fmt::Debug for ScopedReadGuard<V>
where
    V::Target: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<V: View> fmt::Debug for ScopedWriteGuard<V>
where
    V::Target: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
