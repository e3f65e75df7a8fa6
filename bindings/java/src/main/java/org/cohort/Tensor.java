package org.cohort;

import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.DoubleBuffer;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.LongBuffer;
import java.nio.ShortBuffer;
import java.util.Arrays;

/**
 * Caller memory described by name, dtype and shape: what the C API calls a
 * {@code cohort_tensor_ref}. A Tensor is a view, it owns nothing native: the memory is a direct
 * {@link java.nio.Buffer} (passed to C by address, zero-copy) or a Java array (float[], int[],
 * long[], short[] for bf16/f16 bits, byte[]), which is copied in for every call, and back out when
 * the call writes it.
 *
 * <p>A buffer is used whole, from index 0 to its capacity, whatever its position and limit;
 * multi-byte buffers must be in the platform's byte order ({@link #allocate} makes such a
 * buffer). The memory must hold exactly the shape's elements: C checks that and reports a wrong
 * size as INVALID_ARGUMENT. Immutable; one Tensor may be passed to many calls.
 */
public final class Tensor {
  // Read by the JNI layer (cohort_java.i, cohortj_refs_acquire): names and types must match there.
  private final String name;
  private final int dtypeCode;
  private final long[] shape;
  private final Object data;
  private final int storage;
  private final long bytes;

  private Tensor(String name, DType dtype, long[] shape, Object data, int storage, long bytes) {
    this.name = name;
    this.dtypeCode = dtype.code();
    this.shape = shape.clone();
    this.data = data;
    this.storage = storage;
    this.bytes = bytes;
  }

  /** f32 elements in a Java array. */
  public static Tensor of(String name, float[] data, long... shape) {
    return array(name, DType.F32, data, data == null ? 0 : data.length,
        cohortj_storage.COHORTJ_FLOATS, shape);
  }

  /** i32 elements in a Java array. */
  public static Tensor of(String name, int[] data, long... shape) {
    return array(
        name, DType.I32, data, data == null ? 0 : data.length, cohortj_storage.COHORTJ_INTS, shape);
  }

  /** i64 elements in a Java array. */
  public static Tensor of(String name, long[] data, long... shape) {
    return array(name, DType.I64, data, data == null ? 0 : data.length,
        cohortj_storage.COHORTJ_LONGS, shape);
  }

  /** bf16 or f16 bit patterns in a Java array. */
  public static Tensor of(String name, short[] data, DType dtype, long... shape) {
    if (dtype != DType.BF16 && dtype != DType.F16) {
      throw CohortException.invalid(
          "Tensor '" + name + "'", "a short[] holds bf16 or f16, not " + dtype.cName());
    }
    return array(
        name, dtype, data, data == null ? 0 : data.length, cohortj_storage.COHORTJ_SHORTS, shape);
  }

  /**
   * Elements of any dtype as raw bytes in a Java array (platform byte order): the array is
   * untyped, so {@code dtype} says what its bytes are, and they must be exactly the shape's
   * elements of it (uint8 data is not converted: four bytes are one f32).
   */
  public static Tensor of(String name, byte[] data, DType dtype, long... shape) {
    if (data == null) throw CohortException.invalid("Tensor '" + name + "'", "the array is null");
    return new Tensor(name, dtype, checkedShape(name, shape), data, cohortj_storage.COHORTJ_BYTES,
        data.length);
  }

  /**
   * Elements in a direct buffer: a ByteBuffer of any dtype (untyped bytes: {@code dtype} says what
   * they are, and its capacity must hold exactly the shape's elements of it), or a typed buffer
   * of its own dtype (FloatBuffer f32, IntBuffer i32, LongBuffer i64, ShortBuffer bf16/f16);
   * any other element type (a DoubleBuffer, an IntBuffer for f32) is INVALID_ARGUMENT.
   */
  public static Tensor of(String name, Buffer buffer, DType dtype, long... shape) {
    checkBuffer("Tensor '" + name + "'", buffer, dtype);
    return new Tensor(name, dtype, checkedShape(name, shape), buffer,
        cohortj_storage.COHORTJ_DIRECT, byteSize(buffer));
  }

  /** A new zeroed direct buffer in the platform's byte order, holding exactly {@code shape}. */
  public static Tensor allocate(String name, DType dtype, long... shape) {
    long n = dtype.size();
    for (long d : checkedShape(name, shape)) {
      if (d < 1 || d > Integer.MAX_VALUE) {
        throw CohortException.invalid("Tensor.allocate '" + name + "'",
            "shape " + Arrays.toString(shape) + " has an extent outside 1..2^31-1");
      }
      n *= d;
      if (n > Integer.MAX_VALUE) break;
    }
    if (n > Integer.MAX_VALUE) {
      throw CohortException.invalid(
          "Tensor.allocate '" + name + "'", n + " bytes exceed one direct buffer");
    }
    ByteBuffer buffer = ByteBuffer.allocateDirect((int) n).order(ByteOrder.nativeOrder());
    return new Tensor(name, dtype, shape, buffer, cohortj_storage.COHORTJ_DIRECT, n);
  }

  /** The same memory under another name (e.g. to bind a batch to another graph input). */
  public Tensor withName(String newName) {
    return new Tensor(newName, DType.of(dtypeCode), shape, data, storage, bytes);
  }

  public String name() {
    return name;
  }

  public DType dtype() {
    return DType.of(dtypeCode);
  }

  public long[] shape() {
    return shape.clone();
  }

  /** The number of elements the shape describes. */
  public long numel() {
    long n = 1;
    for (long d : shape) n *= d;
    return n;
  }

  /** Bytes of the memory (not of the shape: C checks that they agree). */
  public long bytes() {
    return bytes;
  }

  /** The memory: the Buffer or the Java array this Tensor was made with. */
  public Object data() {
    return data;
  }

  /** The direct buffer as a ByteBuffer in the platform's byte order; an error for array memory. */
  public ByteBuffer byteBuffer() {
    if (!(data instanceof ByteBuffer)) {
      throw CohortException.invalid("Tensor '" + name + "'", "its memory is not a ByteBuffer");
    }
    return ((ByteBuffer) data).duplicate().order(ByteOrder.nativeOrder());
  }

  /** The direct buffer as floats (f32); see {@link #byteBuffer}. */
  public FloatBuffer floatBuffer() {
    return data instanceof FloatBuffer ? ((FloatBuffer) data).duplicate()
                                       : byteBuffer().asFloatBuffer();
  }

  /** The direct buffer as ints (i32); see {@link #byteBuffer}. */
  public IntBuffer intBuffer() {
    return data instanceof IntBuffer ? ((IntBuffer) data).duplicate() : byteBuffer().asIntBuffer();
  }

  @Override
  public String toString() {
    return "Tensor '" + name + "' " + dtype().cName() + " " + Arrays.toString(shape) + " ("
        + (storage == cohortj_storage.COHORTJ_DIRECT ? "direct buffer" : "Java array") + ", "
        + bytes + " bytes)";
  }

  /** Whether the memory is a read-only buffer (refused where C writes). */
  boolean isReadOnly() {
    return data instanceof Buffer && ((Buffer) data).isReadOnly();
  }

  /** Null Tensors are refused here, before JNI would meet them. */
  static void checkElements(String function, String arg, Tensor... tensors) {
    if (tensors == null) return; // C reports a missing array by its count
    for (int i = 0; i < tensors.length; ++i) {
      if (tensors[i] == null) throw CohortException.invalid(function, arg + "[" + i + "] is null");
    }
  }

  // ---- checks shared with Comm -----------------------------------------------------------------

  /** Bytes of a buffer's whole capacity. */
  static long byteSize(Buffer b) {
    return (long) b.capacity() * elementBytes(b);
  }

  private static int elementBytes(Buffer b) {
    if (b instanceof ByteBuffer) return 1;
    if (b instanceof ShortBuffer) return 2;
    if (b instanceof FloatBuffer || b instanceof IntBuffer) return 4;
    if (b instanceof LongBuffer || b instanceof DoubleBuffer) return 8;
    return 2; // CharBuffer
  }

  /** A buffer C may read: direct, in native order, of an element type matching dtype. */
  static void checkBuffer(String what, Buffer b, DType dtype) {
    if (b == null) throw CohortException.invalid(what, "the buffer is null");
    if (!b.isDirect()) {
      throw CohortException.invalid(
          what, "the buffer is not direct (use ByteBuffer.allocateDirect or Tensor.allocate)");
    }
    ByteOrder order = orderOf(b);
    if (order != null && order != ByteOrder.nativeOrder()) {
      throw CohortException.invalid(what,
          "the buffer is " + order + ", not in the platform's byte order " + ByteOrder.nativeOrder()
              + " (call .order(ByteOrder.nativeOrder()))");
    }
    boolean fits;
    if (b instanceof ByteBuffer)
      fits = true;
    else if (b instanceof FloatBuffer)
      fits = dtype == DType.F32;
    else if (b instanceof IntBuffer)
      fits = dtype == DType.I32;
    else if (b instanceof LongBuffer)
      fits = dtype == DType.I64;
    else if (b instanceof ShortBuffer)
      fits = dtype == DType.BF16 || dtype == DType.F16;
    else
      fits = false;
    if (!fits)
      throw CohortException.invalid(what, "a " + kindOf(b) + " cannot hold " + dtype.cName());
  }

  private static String kindOf(Buffer b) {
    for (Class<?> c : new Class<?>[] {ByteBuffer.class, ShortBuffer.class, FloatBuffer.class,
             IntBuffer.class, LongBuffer.class, DoubleBuffer.class}) {
      if (c.isInstance(b)) return c.getSimpleName();
    }
    return b.getClass().getSimpleName();
  }

  private static ByteOrder orderOf(Buffer b) {
    if (b instanceof ByteBuffer) return ((ByteBuffer) b).order();
    if (b instanceof ShortBuffer) return ((ShortBuffer) b).order();
    if (b instanceof FloatBuffer) return ((FloatBuffer) b).order();
    if (b instanceof IntBuffer) return ((IntBuffer) b).order();
    if (b instanceof LongBuffer) return ((LongBuffer) b).order();
    if (b instanceof DoubleBuffer) return ((DoubleBuffer) b).order();
    return null;
  }

  /** A typed Java array, whose element size is the dtype's. */
  private static Tensor array(
      String name, DType dtype, Object data, long length, int storage, long[] shape) {
    if (data == null) throw CohortException.invalid("Tensor '" + name + "'", "the array is null");
    return new Tensor(name, dtype, checkedShape(name, shape), data, storage, length * dtype.size());
  }

  private static long[] checkedShape(String name, long[] shape) {
    if (shape == null) throw CohortException.invalid("Tensor '" + name + "'", "the shape is null");
    return shape;
  }
}
