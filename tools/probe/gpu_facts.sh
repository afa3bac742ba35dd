#!/usr/bin/env bash
# Facts of a GPU host that the sandbox depends on, then the CUDA sandbox probe (issue 44).
set -x
id; uname -r; nvidia-smi -L
ls -l /dev/nvidia* ; ls -l /dev/nvidia-caps/ 2>/dev/null
p=$PWD; while [ "$p" != / ]; do ls -ld "$p"; p=$(dirname "$p"); done
python3 -c 'import sys,torch;print(sys.executable, sys.prefix, torch.__file__, torch.__version__)'
ls -ld /opt /opt/torch /opt/torch/.venv /usr/local/cuda 2>&1; ls -ld ~ ~/.cache 2>&1
unshare --version; which setpriv newuidmap nvcc ninja
mount | grep cgroup; cat /proc/self/cgroup; cat /sys/fs/cgroup/cgroup.subtree_control /sys/fs/cgroup/cgroup.controllers 2>&1
ls -l /proc/driver/nvidia 2>&1 | head -5
set +x
gcc -shared -fPIC -O1 -o /tmp/openlog.so tools/probe/openlog.c -ldl
timeout 300 python3 tools/cuda_sandbox_probe.py --preload /tmp/openlog.so 2>&1
dmesg 2>/dev/null | grep -i landlock | tail -20
