package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// BlockState is a block's state in a memory snapshot (cgc_block_state_t, 1.6).
type BlockState int32

// Block states.
const (
	BlockFree      BlockState = C.CGC_BLOCK_STATE_FREE      // cached: reusable
	BlockAllocated BlockState = C.CGC_BLOCK_STATE_ALLOCATED // handed out and not yet freed
	BlockWaiting   BlockState = C.CGC_BLOCK_STATE_WAITING   // freed, not yet reusable: work recorded on it may still run
)

func (s BlockState) String() string {
	switch s {
	case BlockFree:
		return "Free"
	case BlockAllocated:
		return "Allocated"
	case BlockWaiting:
		return "Waiting"
	}
	return fmt.Sprintf("BlockState(%d)", int32(s))
}

// PoolID says which pool a Segment belongs to: the pool's handle as a number, holding no
// reference (the pool may be gone by the time it is read). Pool.ID gives a live Pool's.
type PoolID uintptr

// ID is the pool's PoolID (0 for a nil or closed Pool), to compare with Segment.Pool.
func (p *Pool) ID() PoolID {
	if p == nil || p.closed {
		return 0
	}
	return PoolID(uintptr(unsafe.Pointer(p.h)))
}

// Segment is one segment (a driver allocation of the device cache or of a pool) of a memory
// snapshot, with its blocks (cgc_segment_info_t, 1.6).
type Segment struct {
	Address        DevicePtr
	Size           uint64 // its blocks' sizes add up to it
	AllocatedBytes uint64 // its blocks handed out and not yet freed
	Pool           PoolID // the private pool it belongs to; 0: the device's cache
	StreamID       uint64 // the stream its free blocks are kept for (Stream.ID); 0: any stream
	Small          bool   // a segment of small requests (2 MiB, for requests up to 1 MiB)
	Blocks         []Block
}

// Block is one block of a Segment (cgc_block_info_t, 1.6).
type Block struct {
	Address   DevicePtr
	Size      uint64 // what it spans (a 512-byte multiple)
	Requested uint64 // what was asked for, for an allocated block; 0 otherwise
	State     BlockState
}

// MemorySnapshot (1.6) is the device's memory as cgc holds it (cgc_memory_snapshot), like
// PyTorch's torch.cuda.memory_snapshot(): every segment of the device cache and of every pool,
// sorted by address, each with its blocks in address order; the segments' sizes add up to
// MemoryStats(nil).BytesReserved. A diagnostic: the library walks every block with the device
// allocator's lock held (allocations on other threads wait meanwhile). Segments may come and go
// between the call that asks for the totals and the one that fills the arrays: the arrays get
// some slack and the call is repeated until they fit.
func (c *Context) MemorySnapshot() ([]Segment, error) {
	ch, err := c.handle("Context.MemorySnapshot")
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(c)
	var nSegments, nBlocks C.size_t
	var msg *C.char
	if err := check(C.cgcgo_memory_snapshot(ch, nil, 0, nil, 0, &nSegments, &nBlocks, &msg), msg); err != nil {
		return nil, err
	}
	for nSegments > 0 || nBlocks > 0 {
		maxSegments, maxBlocks := nSegments+nSegments/4+4, nBlocks+nBlocks/4+16
		segments := make([]C.cgcgo_segment_t, maxSegments)
		blocks := make([]C.cgcgo_block_t, maxBlocks)
		err := check(C.cgcgo_memory_snapshot(ch, &segments[0], maxSegments, &blocks[0], maxBlocks, &nSegments,
			&nBlocks, &msg), msg)
		if err != nil {
			return nil, err
		}
		if nSegments <= maxSegments && nBlocks <= maxBlocks {
			return convertSnapshot(segments[:nSegments], blocks[:nBlocks]), nil
		}
		// They grew in between: nothing was written but the totals.
	}
	return []Segment{}, nil
}

// convertSnapshot turns the shim's arrays of a snapshot that fitted into Go values.
func convertSnapshot(segments []C.cgcgo_segment_t, blocks []C.cgcgo_block_t) []Segment {
	out := make([]Segment, len(segments))
	for i, s := range segments {
		first, n := int(s.first_block), int(s.n_blocks)
		seg := Segment{
			Address:        DevicePtr(uintptr(s.address)),
			Size:           uint64(s.size),
			AllocatedBytes: uint64(s.allocated_bytes),
			Pool:           PoolID(s.pool),
			StreamID:       uint64(s.stream_id),
			Small:          s.small != 0,
			Blocks:         make([]Block, n),
		}
		for j, b := range blocks[first : first+n] {
			seg.Blocks[j] = Block{
				Address:   DevicePtr(uintptr(b.address)),
				Size:      uint64(b.size),
				Requested: uint64(b.requested),
				State:     BlockState(b.state),
			}
		}
		out[i] = seg
	}
	return out
}
