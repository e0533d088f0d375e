#!/bin/bash
# The RayJob's entrypoint: Ray's job supervisor runs it on the head pod, with RAY_ADDRESS set to this cluster and the
# head's environment (the token, the S3 keys and the stores' passwords, all from Secrets). Written by dmlstudy kuberay.
set -u

# --- values: filled in by dmlstudy kuberay, each quoted for bash ---
# shellcheck disable=SC2016,SC1003  # a value is literal text: a $, ` or \ in it is a character, never expanded
{
  SPEC={{sh:spec}}
  STUDY_NAME={{sh:name}}
  # The driver writes the study's spec file to the bucket when it starts it. A RayJob retried after a failure
  # (backoffLimit: a new cluster) or applied again finds it there and continues the study: finished trials are kept,
  # running ones restart from their last checkpoint (python -m study.run refuses an existing study without --resume).
  STUDY_SPEC={{sh:study_spec}}
}
# --- end values ---

python -c 'import sys; from study.runtime.storage import read_bytes; sys.exit(0 if read_bytes(sys.argv[1]) is not None else 3)' "$STUDY_SPEC"
case $? in
  0) echo "continuing study $STUDY_NAME (found $STUDY_SPEC): --resume"; set -- --resume ;;
  3) echo "starting study $STUDY_NAME"; set -- ;;
  *) echo "error: cannot tell whether $STUDY_SPEC exists (above): check the S3 Secret and AWS_ENDPOINT_URL" >&2; exit 1 ;;
esac
exec python -m study.run "$SPEC" "$@" --max-failures {{int:max_failures}}
