//! The host's frames in a recording (see [`RawFrame::Host`](crate::shared::RawFrame::Host)):
//! a mapping for each object they are in, where it is loaded (their addresses are the
//! process's, as native profilers give them), a frame for each address, named when a profile
//! is built, as the guest's frames are.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::profile::{Frame, FrameId, Mapping, MappingId, ProfileBuilder};
use crate::resolve::symbolize::SourceFrame;
use crate::resolve::Resolver;
use crate::shared::loaded_objects::object_at;

#[derive(Default)]
pub(super) struct HostFrames {
    /// By object, its index in [`crate::shared::loaded_objects::loaded_objects`].
    mappings: FxHashMap<usize, MappingId>,
    frames: Vec<(FrameId, u64)>,
}

impl HostFrames {
    /// The frame of host code at `address`, unnamed until [`Self::source_frames`].
    pub(super) fn frame(&mut self, builder: &mut ProfileBuilder, address: u64) -> FrameId {
        let mapping = object_at(address).map(|(i, o)| {
            *self.mappings.entry(i).or_insert_with(|| {
                builder.add_mapping(Mapping {
                    file_name: o.path.clone(),
                    build_id: o.build_id.clone(),
                    size: o.range.end - o.range.start,
                    start: o.range.start,
                })
            })
        });
        let id = builder.frame(&Frame {
            mapping,
            address,
            lines: Vec::new(),
        });
        self.frames.push((id, address));
        id
    }

    /// Each host frame with its names, innermost first.
    pub(super) fn source_frames(
        &self,
        resolver: &mut Resolver,
    ) -> Vec<(FrameId, Arc<[SourceFrame]>)> {
        self.frames
            .iter()
            .map(|&(id, address)| (id, resolver.host_source_frames(address)))
            .collect()
    }
}
