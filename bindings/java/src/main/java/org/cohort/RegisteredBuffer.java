package org.cohort;

import java.nio.ByteBuffer;

/**
 * Registered memory of a communicator ({@code cohort_comm_mem_alloc}), like NCCL's registered
 * buffers: made by {@link Comm#alloc}, zeroed, and passed to {@link Comm}'s collectives as it is.
 * Where the ranks share a host, collectives of 256 KiB and more read and write it in place
 * instead of copying it through shared slots.
 *
 * <p>A JVM cannot revoke a direct ByteBuffer once handed out, and this memory goes away when it
 * is freed or its communicator closes, so it is never exposed as one: Java reads and writes it by
 * bulk copies ({@code put}, {@code get}, {@code putBytes}, {@code getBytes}), each checked against
 * the buffer's bounds and state. Element indexes count elements of the buffer's dtype; the
 * typed copies take the Java array of that dtype (float[] f32, int[] i32, long[] i64, short[]
 * bf16 and f16 bit patterns), the byte copies any ByteBuffer, in the platform's byte order.
 *
 * <p>Allocating and freeing are collective: every rank allocates the same count and dtype and
 * frees the buffer at the same point among its operations on the communicator ({@link #free}, or
 * {@link #close} at the end of a try-with-resources block). Closing the communicator releases the
 * memory not yet freed. After that, or after {@code free()}, every use throws {@link
 * CohortException} with INVALID_HANDLE; {@code free()} while an open {@link Work} uses the buffer
 * throws INVALID_STATE (close the Work first). Not freed by the garbage collector.
 *
 * <p>Copies, {@code free()} and the communicator's close hold this object's lock, so the memory is
 * never unmapped under a copy running on another thread. Like a direct buffer given to a
 * collective, the memory must not be touched while a Work using it is open.
 */
public final class RegisteredBuffer implements AutoCloseable {
  private final Comm comm;
  private final DType dtype;
  private final long count;
  private final long byteSize;
  /** The memory, or 0 once freed or released with the communicator. */
  private long address;
  private boolean released;
  /** Open Works whose operation uses this memory. */
  private int inFlight;

  RegisteredBuffer(Comm comm, long address, long count, DType dtype) {
    this.comm = comm;
    this.address = address;
    this.count = count;
    this.dtype = dtype;
    this.byteSize = count * dtype.size();
  }

  /** The communicator that allocated the memory. */
  public Comm comm() {
    return comm;
  }

  public DType dtype() {
    return dtype;
  }

  /** The number of elements. */
  public long count() {
    return count;
  }

  public long byteSize() {
    return byteSize;
  }

  /** Whether the memory is gone: freed, or released when its communicator closed. */
  public synchronized boolean isFreed() {
    return address == 0;
  }

  @Override
  public String toString() {
    String state;
    synchronized (this) {
      state = address != 0 ? "live" : released ? "released with its communicator" : "freed";
    }
    return "RegisteredBuffer(" + count + " " + dtype.cName() + ", " + state + ")";
  }

  // ---- copies -------------------------------------------------------------------------------

  /** Copies {@code src} into elements [index, index + src.length) (f32). */
  public void put(long index, float[] src) {
    put(index, src, 0, src == null ? 0 : src.length);
  }

  /** Copies src[offset, offset + length) into elements [index, index + length) (f32). */
  public synchronized void put(long index, float[] src, int offset, int length) {
    String fn = "RegisteredBuffer.put";
    long at =
        at(fn, "float[]", DType.F32, null, index, src == null ? -1 : src.length, offset, length);
    CohortC.cohortj_mem_floats(at, src, offset, length, 1);
  }

  /** Copies elements [index, index + dst.length) into {@code dst} (f32). */
  public void get(long index, float[] dst) {
    get(index, dst, 0, dst == null ? 0 : dst.length);
  }

  /** Copies elements [index, index + length) into dst[offset, offset + length) (f32). */
  public synchronized void get(long index, float[] dst, int offset, int length) {
    String fn = "RegisteredBuffer.get";
    long at =
        at(fn, "float[]", DType.F32, null, index, dst == null ? -1 : dst.length, offset, length);
    CohortC.cohortj_mem_floats(at, dst, offset, length, 0);
  }

  /** Copies {@code src} into elements [index, index + src.length) (i32). */
  public void put(long index, int[] src) {
    put(index, src, 0, src == null ? 0 : src.length);
  }

  public synchronized void put(long index, int[] src, int offset, int length) {
    String fn = "RegisteredBuffer.put";
    long at =
        at(fn, "int[]", DType.I32, null, index, src == null ? -1 : src.length, offset, length);
    CohortC.cohortj_mem_ints(at, src, offset, length, 1);
  }

  public void get(long index, int[] dst) {
    get(index, dst, 0, dst == null ? 0 : dst.length);
  }

  public synchronized void get(long index, int[] dst, int offset, int length) {
    String fn = "RegisteredBuffer.get";
    long at =
        at(fn, "int[]", DType.I32, null, index, dst == null ? -1 : dst.length, offset, length);
    CohortC.cohortj_mem_ints(at, dst, offset, length, 0);
  }

  /** Copies {@code src} into elements [index, index + src.length) (i64). */
  public void put(long index, long[] src) {
    put(index, src, 0, src == null ? 0 : src.length);
  }

  public synchronized void put(long index, long[] src, int offset, int length) {
    String fn = "RegisteredBuffer.put";
    long at =
        at(fn, "long[]", DType.I64, null, index, src == null ? -1 : src.length, offset, length);
    CohortC.cohortj_mem_longs(at, src, offset, length, 1);
  }

  public void get(long index, long[] dst) {
    get(index, dst, 0, dst == null ? 0 : dst.length);
  }

  public synchronized void get(long index, long[] dst, int offset, int length) {
    String fn = "RegisteredBuffer.get";
    long at =
        at(fn, "long[]", DType.I64, null, index, dst == null ? -1 : dst.length, offset, length);
    CohortC.cohortj_mem_longs(at, dst, offset, length, 0);
  }

  /** Copies bit patterns into elements [index, index + src.length) (bf16 or f16). */
  public void put(long index, short[] src) {
    put(index, src, 0, src == null ? 0 : src.length);
  }

  public synchronized void put(long index, short[] src, int offset, int length) {
    String fn = "RegisteredBuffer.put";
    long at = at(
        fn, "short[]", DType.BF16, DType.F16, index, src == null ? -1 : src.length, offset, length);
    CohortC.cohortj_mem_shorts(at, src, offset, length, 1);
  }

  public void get(long index, short[] dst) {
    get(index, dst, 0, dst == null ? 0 : dst.length);
  }

  public synchronized void get(long index, short[] dst, int offset, int length) {
    String fn = "RegisteredBuffer.get";
    long at = at(
        fn, "short[]", DType.BF16, DType.F16, index, dst == null ? -1 : dst.length, offset, length);
    CohortC.cohortj_mem_shorts(at, dst, offset, length, 0);
  }

  /**
   * Copies the remaining bytes of {@code src} (heap or direct, in the platform's byte order) to
   * bytes [byteOffset, byteOffset + src.remaining()) and advances its position.
   */
  public synchronized void putBytes(long byteOffset, ByteBuffer src) {
    copyBytes("RegisteredBuffer.putBytes", byteOffset, src, true);
  }

  /**
   * Fills the remaining bytes of {@code dst} from bytes [byteOffset, byteOffset + dst.remaining())
   * and advances its position.
   */
  public synchronized void getBytes(long byteOffset, ByteBuffer dst) {
    if (dst != null && dst.isReadOnly()) {
      throw CohortException.invalid("RegisteredBuffer.getBytes", "dst is a read-only buffer");
    }
    copyBytes("RegisteredBuffer.getBytes", byteOffset, dst, false);
  }

  // ---- freeing ------------------------------------------------------------------------------

  /**
   * Frees the memory once the operations issued before it on the communicator have finished.
   * Collective: every rank frees its buffer at the same point. INVALID_HANDLE when freed already
   * or released with the communicator; INVALID_STATE while an open Work uses the buffer.
   */
  public synchronized void free() {
    String fn = "RegisteredBuffer.free";
    long a = live(fn);
    if (inFlight > 0) {
      throw new CohortException(Status.INVALID_STATE,
          fn + ": " + inFlight + " open Work(s) use the " + describe()
              + "; wait for and close them first");
    }
    address = 0;
    comm.forget(this);
    CohortException.check(CohortC.cohort_comm_mem_free(comm.ptr(), a));
  }

  /**
   * Frees the memory like {@link #free} unless it is gone already (freed, or released with its
   * communicator), so that a try-with-resources block frees it at the same point on every rank.
   */
  @Override
  public void close() {
    synchronized (this) {
      if (address == 0) return;
    }
    free();
  }

  // ---- for Comm -----------------------------------------------------------------------------

  /** The address for an operation that will use the memory until {@link #unpin}. */
  synchronized long pin(String fn, String arg) {
    if (address == 0) throw gone(fn + ": " + arg);
    ++inFlight;
    return address;
  }

  synchronized void unpin() {
    --inFlight;
  }

  /** Throws INVALID_STATE, naming fn, while an open Work uses the memory. */
  synchronized void checkIdle(String fn) {
    if (inFlight > 0) {
      throw new CohortException(Status.INVALID_STATE,
          fn + ": the " + describe() + " is used by " + inFlight
              + " open Work(s) of another communicator; wait for and close them first");
    }
  }

  /** The communicator is being destroyed, which unmaps the memory. */
  synchronized void release() {
    address = 0;
    released = true;
  }

  // ---- checks -------------------------------------------------------------------------------

  private String describe() {
    return "registered buffer of " + count + " " + dtype.cName();
  }

  private CohortException gone(String where) {
    return new CohortException(Status.INVALID_HANDLE,
        where + ": the " + describe() + " was "
            + (released ? "released when its communicator was closed" : "freed"));
  }

  /** The address, or INVALID_HANDLE naming fn once the memory is gone. Hold the lock. */
  private long live(String fn) {
    if (address == 0) throw gone(fn);
    return address;
  }

  /**
   * The address of elements [index, index + length) after checking the state, the array (one of
   * arrayLength elements, -1 for null), that the buffer's dtype is one the array type holds, and
   * both ranges. Hold the lock.
   */
  private long at(String fn, String arrayType, DType want, DType orWant, long index,
      int arrayLength, int offset, int length) {
    long a = live(fn);
    if (arrayLength < 0) throw CohortException.invalid(fn, "the array is null");
    if (dtype != want && dtype != orWant) {
      throw CohortException.invalid(fn,
          "a " + arrayType + " does not hold " + dtype.cName() + " elements, the dtype of this "
              + describe());
    }
    if (offset < 0 || length < 0 || offset > arrayLength - length) {
      throw CohortException.invalid(fn,
          "offset " + offset + " and length " + length + " do not fit a " + arrayType + " of "
              + arrayLength);
    }
    if (index < 0 || index > count - length) {
      throw CohortException.invalid(
          fn, "elements [" + index + ", " + (index + length) + ") are outside the " + describe());
    }
    return a + index * dtype.size();
  }

  private void copyBytes(String fn, long byteOffset, ByteBuffer b, boolean toNative) {
    long a = live(fn);
    if (b == null) throw CohortException.invalid(fn, "the buffer is null");
    // Position and limit read once: within the capacity whatever another thread does to them.
    int position = b.position();
    int n = Math.max(b.limit() - position, 0);
    if (byteOffset < 0 || byteOffset > byteSize - n) {
      throw CohortException.invalid(fn,
          "bytes [" + byteOffset + ", " + (byteOffset + n) + ") are outside the " + describe()
              + " (" + byteSize + " bytes)");
    }
    long at = a + byteOffset;
    if (b.isDirect()) {
      CohortC.cohortj_mem_direct(at, b, position, n, toNative ? 1 : 0);
    } else if (b.hasArray()) {
      CohortC.cohortj_mem_bytes(at, b.array(), b.arrayOffset() + position, n, toNative ? 1 : 0);
    } else { // a read-only heap buffer, a source only: through a copy
      byte[] copy = new byte[n];
      b.duplicate().position(position).limit(position + n).get(copy);
      CohortC.cohortj_mem_bytes(at, copy, 0, n, 1);
    }
    b.position(position + n);
  }
}
