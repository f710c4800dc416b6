# Switchboard: slim Python base, non-root, the README's install command (scripts/dev install)
# from the hash-checked lock.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    SWITCHBOARD_VENV=/opt/switchboard/.venv SWITCHBOARD_PORT=8080
# WORKDIR would create the source directory owned by root: create it for the user, who
# builds the package in it (*.egg-info, build/)
RUN useradd --system --create-home --home-dir /opt/switchboard switchboard \
 && install -d -o switchboard -g switchboard /opt/switchboard/src
WORKDIR /opt/switchboard/src
USER switchboard

# the locked dependencies first, in their own layer: a change to the sources does not
# install them again
COPY --chown=switchboard:switchboard pyproject.toml README.md requirements-pip.lock requirements.lock ./
COPY --chown=switchboard:switchboard scripts ./scripts
RUN scripts/dev install --deps-only

COPY --chown=switchboard:switchboard app ./app
COPY --chown=switchboard:switchboard providers ./providers
COPY --chown=switchboard:switchboard transformers ./transformers
COPY --chown=switchboard:switchboard config.example.yaml ./
RUN scripts/dev install --no-editable

EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/opt/switchboard/.venv/bin/python", "-c", "import os, sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('SWITCHBOARD_PORT', '8080'), timeout=2).status != 200)"]
# the port comes from SWITCHBOARD_PORT (the HEALTHCHECK reads it too); arguments after the
# image name go to `switchboard serve`
ENTRYPOINT ["/bin/sh", "-c", "exec /opt/switchboard/.venv/bin/switchboard serve --host 0.0.0.0 --port \"$SWITCHBOARD_PORT\" \"$@\"", "switchboard"]
CMD ["--config", "/opt/switchboard/src/config.example.yaml"]
