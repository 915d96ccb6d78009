//! Resident memory: ringtail's components allocate with mimalloc (fast for
//! the per-event work), tuned not to keep memory they do not use.
//!
//! mimalloc reads its options when the process starts, before `main`, so the
//! tuning travels in the environment: the supervisor sets [`ENV`] for every
//! component, and the systemd units set it too.

/// Arenas committed as they are used, not up front: halves an idle
/// component's resident memory.
pub const ENV: (&str, &str) = ("MIMALLOC_ARENA_EAGER_COMMIT", "0");

/// Returns freed memory to the system now (after a one-off peak, such as
/// the loader parsing the kernel's BTF).
pub fn release() {
    // SAFETY: a collection has no preconditions.
    unsafe { libmimalloc_sys::mi_collect(true) };
}
