//! Running two pieces of pure work side by side, for the few large-input
//! steps where a second core halves the latency (decoding a 1 MB string in
//! two halves; hashing beside the synopsis).

/// Runs `there` on a scoped thread named `name` while `here` runs on this
/// one, and returns both results. If no thread can be started (or it died),
/// `there` runs here afterwards: the result never depends on where it ran.
pub fn beside<A: Send, B>(
    name: &str,
    there: impl Fn() -> A + Sync,
    here: impl FnOnce() -> B,
) -> (A, B) {
    std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name(name.to_string())
            .spawn_scoped(scope, &there);
        let b = here();
        let a = spawned
            .ok()
            .and_then(|handle| handle.join().ok())
            .unwrap_or_else(&there);
        (a, b)
    })
}
