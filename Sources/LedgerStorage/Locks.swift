#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A readers–writer lock (`pthread_rwlock_t`).
///
/// LMDB lets the map size change only while this process has no transaction open, so every
/// transaction holds this lock shared and a resize holds it exclusively.
final class ReadersWriterLock: @unchecked Sendable {
    // @unchecked Sendable: the pthread lock is itself the synchronisation; the pointer is
    // allocated once in init and freed in deinit, never reassigned.
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>

    init() {
        lock = .allocate(capacity: 1)
        lock.initialize(to: pthread_rwlock_t())
        // Default (reader-preferring) kind: a thread may take the shared side twice without
        // deadlocking behind a waiting resize; read transactions are short, so a resize waits
        // at most for the ones already running.
        pthread_rwlock_init(lock, nil)
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    func lockShared() { pthread_rwlock_rdlock(lock) }
    func lockExclusive() { pthread_rwlock_wrlock(lock) }
    func unlock() { pthread_rwlock_unlock(lock) }
}
