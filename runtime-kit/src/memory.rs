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

/// What a heap allocation of `n` bytes really takes: the allocator's size
/// class for it (mimalloc rounds up, by at most an eighth above 1 KiB).
/// Bounds that count memory count this, not the bytes asked for.
pub fn allocated(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    // SAFETY: a pure computation on an integer.
    unsafe { libmimalloc_sys::mi_good_size(n) }
}

/// The most a hash table (hashbrown) holds for each entry of `entry`
/// bytes: it keeps its buckets at most 7/8 full and doubles when full, so
/// just after growing it has 16/7 buckets per entry, each with a control
/// byte.
pub const fn table_slot(entry: usize) -> usize {
    (entry + 1) * 16 / 7 + 1
}

/// How often [`collector`] collects.
pub const COLLECT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Collects this thread's heap every [`COLLECT_EVERY`] until `shutdown`:
/// mimalloc returns freed pages to the system (decommits them) once their
/// purge delay has passed, but it does so during later allocations and
/// frees of the same thread, so a component that goes quiet after a burst
/// (an attacker's load, then nothing) kept all of it resident. Measured on
/// the span-actor (span-actor/tests/memory.rs): 60 services' routes, then
/// idle, +62 MiB resident without, +22 MiB with. Not a forced collection:
/// pages freed within the purge delay wait for the next turn.
pub async fn collector(mut shutdown: crate::shutdown::Shutdown) {
    let mut tick = tokio::time::interval(COLLECT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                // SAFETY: a collection has no preconditions.
                unsafe { libmimalloc_sys::mi_collect(false) };
            }
            _ = shutdown.fired() => return,
        }
    }
}
