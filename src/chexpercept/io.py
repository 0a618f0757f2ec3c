"""Core re-export module: the public names of the file, image, frame, provenance and layouts.

It keeps the one name (``chexpercept.io``) the code has imported them by.

The code lives in the module of its concern:

- :mod:`chexpercept.files`: atomic writes, JSON / JSONL / CSV;
- :mod:`chexpercept.images`: PNG writing, CXR and mask reading in the working frame;
- :mod:`chexpercept.frame`: the working-frame transform of Stage 00;
- :mod:`chexpercept.provenance`: git state, package versions, ``run_meta.json``, redaction;
- :mod:`chexpercept.layouts`: every artifact path, folder-name builders next to their parsers.

New code may import from either; this module adds nothing of its own.
"""

from chexpercept.files import (  # noqa: F401 - re-exported
    append_jsonl,
    atomic_path,
    dumps_json,
    read_csv_rows,
    read_json,
    read_jsonl,
    to_jsonable,
    write_bytes_atomic,
    write_csv_atomic,
    write_json_atomic,
    write_text_atomic,
)
from chexpercept.frame import (  # noqa: F401 - re-exported
    PREPARE_MODES,
    FrameTransform,
    frame_transform,
    image_to_frame,
    mask_to_frame,
    mask_to_original,
    read_frame_transform,
    transform_sidecar,
    transforms_index,
)
from chexpercept.images import (  # noqa: F401 - re-exported
    WORK_SIZE,
    check_mask_shape,
    png_bytes,
    read_cxr,
    read_mask,
    write_mask,
    write_png_atomic,
)
from chexpercept.layouts import (  # noqa: F401 - re-exported
    ALL_ATTRIBUTE_CSV,
    ALL_REVISION_CSV,
    ALL_SUMMARY_CSV,
    CONTOUR_EVAL_RELPATH,
    CONTOUR_QA_DIR,
    DETECTION_IMAGE,
    MODEL_ATTRIBUTE_CSV,
    MODEL_REVISION_CSV,
    MODEL_SUMMARY_CSV,
    NO_THINKING_SUFFIX,
    PLOT_NAMES,
    POINTS_IMAGE,
    REVISION_DIR,
    STAGE_DIRS,
    BenchmarkLayout,
    CurationLayout,
    DeformationLayout,
    QALayout,
    all_models_dir,
    all_results_path,
    anatomy_mask_path,
    eval_part_dir,
    eval_run_dir,
    faults_path,
    option_image_name,
    parse_run_name,
    records_path,
    repo_root,
    run_manifest_path,
    stage_output_dir,
)
from chexpercept.provenance import (  # noqa: F401 - re-exported
    SCHEMA_VERSION,
    git_state,
    is_secret_name,
    package_versions,
    provenance,
    redact_secrets,
    write_run_meta,
)
