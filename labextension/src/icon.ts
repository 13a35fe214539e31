import { LabIcon } from '@jupyterlab/ui-components';

const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="currentColor">
    <path d="M7 7h10v10H7z" fill-opacity="0.35"/>
    <path d="M9 2h2v3H9zm4 0h2v3h-2zM9 19h2v3H9zm4 0h2v3h-2zM2 9h3v2H2zm0 4h3v2H2zm17-4h3v2h-3zm0 4h3v2h-3zM5 5h14v14H5zm2 2v10h10V7z"/>
  </g>
</svg>`;

/** The GPU chip on the sidebar tab and in the settings editor. */
export const chipIcon = new LabIcon({ name: 'gpucloud:chip', svgstr: svg });
