# Switchboard: slim Python base, non-root, same install command as the README.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 SWITCHBOARD_VENV=/opt/switchboard/.venv
RUN useradd --system --create-home --home-dir /opt/switchboard switchboard
WORKDIR /opt/switchboard/src
COPY --chown=switchboard:switchboard pyproject.toml README.md ./
COPY --chown=switchboard:switchboard scripts ./scripts
COPY --chown=switchboard:switchboard app ./app
COPY --chown=switchboard:switchboard providers ./providers
COPY --chown=switchboard:switchboard transformers ./transformers
COPY --chown=switchboard:switchboard config.example.yaml ./
USER switchboard
RUN scripts/dev install

EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/opt/switchboard/.venv/bin/python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"]
ENTRYPOINT ["/opt/switchboard/.venv/bin/switchboard", "serve"]
CMD ["--config", "/opt/switchboard/src/config.example.yaml", "--host", "0.0.0.0", "--port", "8080"]
