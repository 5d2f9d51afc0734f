set -x
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .devcheck/whl/*.whl || exit 1
nvidia-smi --query-gpu=name,memory.used --format=csv
ls /usr/local/cuda/lib64 2>/dev/null | grep -i cublas | head -3; which nvcc; python3 -c "import skbuild_core" 2>&1; python3 -m pip show scikit-build-core 2>/dev/null | head -2
REPO=$PWD
tar xzf .devcheck/src.tgz -C /tmp
cd /tmp/src
START=$(date +%s)
CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=off" CMAKE_BUILD_PARALLEL_LEVEL=16 timeout 420 python3 -m pip install --no-build-isolation --no-deps --no-cache-dir --target /tmp/site . > $OUT/build.log 2>&1
echo "build rc=$? in $(( $(date +%s) - START )) s"
tail -15 $OUT/build.log
cd $REPO
export PYTHONPATH=/tmp/site:$REPO/core:$REPO/plugins/llamacpp
timeout 100 python3 .devcheck/gpu_check.py > $OUT/check.log 2>&1; echo "check rc=$?"
grep -aE "offload|CUDA|llama_cpp |SAME|'layers'|backend|Traceback|Error" $OUT/check.log | head -40
# Issue 43's placement settings (experts in host memory, tensor overrides, LoRA, a draft model) on the GPU.
timeout 200 python3 .devcheck/moe_check.py /tmp/moe-check > $OUT/moe.log 2>&1; echo "moe check rc=$?"
grep -aE "RESULT|ALL SAME|DIFFERENT|overridden to|model buffer size|Traceback|Error" $OUT/moe.log | head -40
