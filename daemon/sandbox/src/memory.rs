//! Giving freed heap memory back to the kernel.

/// Hands the free memory glibc's allocator holds (in every arena, free pages in the middle of a
/// heap included) back to the kernel, so that the daemon's resident memory goes back down after
/// a reload dropped a generation or a large answer was sent, instead of staying at its peak.
/// Whether anything was released (always `false` where the C library has no `malloc_trim`).
pub fn release_free_memory() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: malloc_trim takes no pointer and touches only the allocator's own state, under
        // the allocator's locks; it may be called from any thread at any time.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}
