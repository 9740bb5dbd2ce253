# After a trial of run-cgroup.sh: remove the container, then the trial's
# cgroup directory, deepest first (a relayd that was killed leaves its
# cgroups behind; they are empty once the container is gone).
docker rm --force "$TRIAL"
find "$CGROUP" -depth -type d -exec rmdir {} +
