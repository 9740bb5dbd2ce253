"""A stand-in for Harbor (github.com/harbor-framework/harbor, formerly
laude-institute/harbor), written here for relayd_client.harbor's tests,
since Harbor cannot be installed on this project's machines (its
dependencies are not in the archives they reach).

It mirrors only what the adapter touches and the calls Harbor makes on an
environment, with the signatures of Harbor's main branch of 2026-06-09
(read at the mirror lieexxli/harbor, commit 2922220, "Preserve tagged
Docker images on delete (#1861)"):

- environments/base.py: ExecResult; BaseEnvironment's constructor
  (persistent_env, mounts, network_policy, extra_docker_compose, ...),
  default_user, _resolve_user, with_default_user, _merge_env,
  ensure_dirs and empty_dirs (POSIX), prepare_logs_for_host, the abstract
  methods;
- environments/docker/__init__.py and its compose files
  (docker-compose-build.yaml, -prebuilt.yaml, -no-network.yaml: there is
  no docker-compose-base.yaml and no COMPOSE_BASE_PATH any more);
- environments/docker/docker.py: DockerEnvironment's constructor,
  _docker_compose_paths, _compose_task_env, _compose_env_vars,
  _run_docker_compose_command, start, stop, and what its exec does with
  cwd (``cwd or task_env_config.workdir``), user (``-u str(user)``),
  stderr (merged into stdout: ``stderr=STDOUT``, so ``stderr`` is None),
  empty output (None), output of any size (``communicate()``, no limit),
  what docker exec gives for a cwd that is no directory or a user the
  container lacks (exit 126, the runtime's message in that one stream),
  and timeout_sec (``RuntimeError("Command timed out after N
  seconds")``); and environments/docker/docker_unix.py, its files:
  ``docker compose cp`` (``check=True``: a failure is RuntimeError),
  ``upload_file`` as ``cp SRC main:TARGET`` (into TARGET when it is a
  directory, through it when it is a symbolic link: docker's client
  reads the link once), ``upload_dir`` as ``cp SRC/. main:TARGET``,
  downloads as ``cp main:SRC[/.] TARGET`` after a ``chown`` to the
  host's user as root, keeping modes and symbolic links as they are.
  Its exec and file methods raise here, and test_harbor.py holds the
  adapter's to these (the chown before a download is left out: the
  adapter reads as the trial's user instead);
- environments/factory.py: create_environment_from_import_path;
- models/task/config.py: the EnvironmentConfig fields the environment reads;
- verifier/verifier.py: the calls Verifier.verify makes on the environment,
  in order (tests uploaded, chmod as root, the test run as the default
  user), and AddTestsDirError around a failed upload;
- trial order (trial/single_step.py, multi_step.py): the agent's phase
  under its user, artifacts downloaded, the verifier's directories reset
  as root, then Verifier.verify, with nothing the agent started stopped
  in between (Harbor calls no end of the agent's phase): test_harbor.py
  plays it in that order.

No code of Harbor's is copied; pydantic models are plain classes here."""
