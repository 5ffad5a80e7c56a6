//! Running two pieces of pure work side by side, for the few large-input
//! steps where a second core halves the latency (decoding a 1 MB string in
//! two halves; hashing beside the synopsis).

/// Runs `there` on a scoped thread named `name` while `here` runs on this
/// one, and returns both results. If no thread can be started (or it died),
/// `there` runs here afterwards: the result never depends on where it ran.
/// With one CPU to run on (affinity or a cgroup quota) both run here, one
/// after the other: a second thread would only add its start and the
/// switches between the two.
pub fn beside<A: Send, B>(
    name: &str,
    there: impl Fn() -> A + Sync,
    here: impl FnOnce() -> B,
) -> (A, B) {
    if !several_cpus() {
        let a = there();
        return (a, here());
    }
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

/// Whether this process may run on more than one CPU (read once).
fn several_cpus() -> bool {
    static SEVERAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SEVERAL.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}
