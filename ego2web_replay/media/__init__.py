"""Media: the task's egocentric video turned into what agents and judges see.

- :mod:`.keyframes`: frames decoded with PyAV and cached beside the video; judges take
  them from the evidence ranges, agents only from the whole video (:func:`sample_video`);
- :mod:`.video`: clip writing (demo and tests), duration, content hash;
- :mod:`.captions`: timestamped captions of 5-second clips by a multimodal model.
"""

from .keyframes import (
           Keyframe,
           KeyframeError,
           extract_keyframes,
           keyframe_dir,
           sample_video,
)
from .video import video_duration, video_sha256, write_clip

__all__ = ["Keyframe", "KeyframeError", "extract_keyframes", "keyframe_dir", "sample_video",
           "video_duration", "video_sha256", "write_clip"]
