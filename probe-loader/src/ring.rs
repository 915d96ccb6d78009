//! The request-event ring buffer as the loader's write-ahead log.
//!
//! aya's `RingBuf` advances the kernel's consumer position as soon as an
//! item is read: a loader killed after reading but before its batch reached
//! the span-actor loses those events. This reader keeps two positions:
//! `read` (how far this process has read, in memory only) and the kernel's
//! consumer position (`committed`, in the ring's shared consumer page),
//! which the caller advances with [`WalRing::commit`] only past events that
//! are safe elsewhere (received by the span-actor). A restarted loader
//! reading a pinned ring starts again from `committed`: what the previous
//! one read but had not handed over is read again (duplicates are removed
//! downstream: span ids derive from the request and the pinned capture
//! epoch). The price: the kernel sees the space as used until committed, so
//! a stalled downstream fills the ring (and the kernel counts `ring_full`).
//!
//! # Layout
//! The kernel's ring buffer mmap layout (kernel/bpf/ringbuf.c): page 0 is
//! the consumer position (read-write), page 1 the producer position, then
//! the data pages mapped twice in a row (read-only), so a record that wraps
//! around the end is contiguous. Each record is an 8-byte header (`u32`
//! length with the BUSY and DISCARD bits, `u32` page offset) and its data,
//! padded to 8 bytes. Positions only grow; `pos & mask` is the offset.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use aya::maps::MapData;

const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;
const HDR_SZ: usize = 8;

/// Why the ring could not be mapped.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    #[error("cannot read the ring buffer map's info")]
    Info {
        #[source]
        source: aya::maps::MapError,
    },
    #[error("the ring buffer size {size} is not a power-of-two multiple of the page size")]
    Size { size: u32 },
    #[error("cannot mmap the ring buffer")]
    Mmap {
        #[source]
        source: std::io::Error,
    },
}

struct Mapping {
    ptr: NonNull<libc::c_void>,
    len: usize,
}

impl Mapping {
    fn new(fd: BorrowedFd<'_>, len: usize, prot: libc::c_int, offset: usize) -> Result<Mapping, RingError> {
        let off = libc::off_t::try_from(offset).map_err(|_| RingError::Mmap { source: std::io::ErrorKind::InvalidInput.into() })?;
        // SAFETY: a fresh shared mapping of a ring buffer map's fd; the
        // kernel checks length, offset and protection.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.as_raw_fd(), off) };
        if ptr == libc::MAP_FAILED {
            return Err(RingError::Mmap { source: std::io::Error::last_os_error() });
        }
        let ptr = NonNull::new(ptr).ok_or(RingError::Mmap { source: std::io::ErrorKind::InvalidData.into() })?;
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned.
        unsafe { libc::munmap(self.ptr.as_ptr(), self.len) };
    }
}

/// A ring buffer read without consuming; see the module doc.
pub struct WalRing {
    map: MapData,
    consumer: Mapping,
    producer: Mapping,
    page: usize,
    mask: usize,
    read: usize,
}

// SAFETY: the mappings are owned and only accessed through &mut self or
// atomics; nothing is tied to the creating thread.
unsafe impl Send for WalRing {}

impl WalRing {
    /// Maps `map` (a BPF_MAP_TYPE_RINGBUF); reading starts at the kernel's
    /// consumer position.
    pub fn new(map: MapData) -> Result<WalRing, RingError> {
        let size = map.info().map_err(|source| RingError::Info { source })?.max_entries();
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let bytes = size as usize;
        if !bytes.is_power_of_two() || bytes < page {
            return Err(RingError::Size { size });
        }
        let fd = map.fd().as_fd();
        let consumer = Mapping::new(fd, page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let len = bytes.checked_mul(2).and_then(|b| b.checked_add(page)).ok_or(RingError::Size { size })?;
        let producer = Mapping::new(fd, len, libc::PROT_READ, page)?;
        let mut ring = WalRing { map, consumer, producer, page, mask: bytes - 1, read: 0 };
        ring.read = ring.consumer_pos().load(Ordering::Acquire);
        Ok(ring)
    }

    fn consumer_pos(&self) -> &AtomicUsize {
        // SAFETY: page 0 is the kernel's `unsigned long consumer_pos`,
        // page-aligned, mapped read-write for as long as self lives.
        unsafe { self.consumer.ptr.cast::<AtomicUsize>().as_ref() }
    }

    fn producer_pos(&self) -> usize {
        // SAFETY: the first word of the producer mapping is the kernel's
        // `unsigned long producer_pos`.
        unsafe { self.producer.ptr.cast::<AtomicUsize>().as_ref() }.load(Ordering::Acquire)
    }

    /// The next record after `read`, if complete; discarded records are
    /// skipped. Advances `read`, not the kernel's consumer position.
    pub fn next(&mut self) -> Option<&[u8]> {
        loop {
            let producer = self.producer_pos();
            if self.read == producer {
                return None;
            }
            let offset = self.page + (self.read & self.mask);
            // The data pages are mapped twice: header and data never run
            // past the mapping (a record is at most the ring's size).
            // SAFETY: offset + HDR_SZ <= page + size; the header is a u32
            // aligned to 8, written by the kernel with release semantics.
            let header = unsafe { &*self.producer.ptr.as_ptr().cast::<u8>().add(offset).cast::<AtomicU32>() }.load(Ordering::Acquire);
            if header & BUSY_BIT != 0 {
                return None; // reserved, not yet submitted
            }
            let len = (header & !(BUSY_BIT | DISCARD_BIT)) as usize;
            let advance = (HDR_SZ + len).next_multiple_of(8);
            if advance > producer.wrapping_sub(self.read) {
                // A record cannot end past what the kernel wrote: distrust it.
                self.read = producer;
                return None;
            }
            self.read = self.read.wrapping_add(advance);
            if header & DISCARD_BIT != 0 {
                continue;
            }
            let data_at = offset + HDR_SZ;
            if data_at + len > self.producer.len {
                continue; // cannot happen with a sane kernel: skip, never read out of bounds
            }
            // SAFETY: bounds checked above; the kernel no longer writes a
            // submitted record until the consumer position passes it, and
            // it is not passed before this borrow ends (commit needs &mut).
            let data = unsafe { std::slice::from_raw_parts(self.producer.ptr.as_ptr().cast::<u8>().add(data_at), len) };
            return Some(data);
        }
    }

    /// Bytes the kernel counts as used: written and not yet released.
    pub fn used(&self) -> u64 {
        self.producer_pos().wrapping_sub(self.consumer_pos().load(Ordering::Acquire)) as u64
    }

    /// The ring's data size in bytes.
    pub fn size(&self) -> u64 {
        (self.mask as u64).saturating_add(1)
    }

    /// How far this process has read.
    pub fn read_pos(&self) -> u64 {
        self.read as u64
    }

    /// The kernel's consumer position: everything before it is released.
    pub fn committed(&self) -> u64 {
        self.consumer_pos().load(Ordering::Acquire) as u64
    }

    /// Releases everything before `pos` to the kernel. Never moves back,
    /// nor past what was read.
    pub fn commit(&mut self, pos: u64) {
        let pos = pos as usize;
        let current = self.consumer_pos().load(Ordering::Acquire);
        // Positions grow (wrapping only after 2^64 bytes): compare distances.
        let ahead = pos.wrapping_sub(current);
        if ahead == 0 || ahead > self.read.wrapping_sub(current) {
            return;
        }
        self.consumer_pos().store(pos, Ordering::Release);
    }
}

impl AsFd for WalRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.map.fd().as_fd()
    }
}

impl AsRawFd for WalRing {
    fn as_raw_fd(&self) -> RawFd {
        self.map.fd().as_fd().as_raw_fd()
    }
}
