/** A kernel of this server whose instance is lost, as `GET /gpucloud/kernels/lost` lists it. */
export interface ILostKernel {
  kernelId: string;
  notebook: string;
  instance: string;
  sentence: string;
  checkpoint: string;
  state: 'lost' | 'restoring' | 'failed' | 'restored';
  progress: string;
  message: string;
}

/** What a lost kernel's row shows. */
export interface ILostText {
  name: string;
  status: string;
  detail: string;
  canRestore: boolean;
  showRestore: boolean;
  restoreLabel: string;
  restoreTitle: string;
}

/**
 * The row of a lost kernel: its notebook, what happened, and whether Restore can run (a
 * checkpoint exists and no restore is under way). A failed restore can be tried again.
 */
export function formatLost(row: ILostKernel): ILostText {
  const name = row.notebook ? row.notebook.split('/').pop() || row.notebook : `kernel ${row.kernelId.slice(0, 8)}`;
  const restoring = row.state === 'restoring';
  const restored = row.state === 'restored';
  const status = restoring
    ? 'restoring…'
    : restored
      ? 'restored'
      : row.state === 'failed'
        ? 'restore failed'
        : 'instance lost';
  const detail = restoring ? row.progress : row.message || row.sentence;
  const canRestore = !!row.checkpoint && !restoring && !restored;
  const restoreTitle = row.checkpoint
    ? `Launch an instance like ${row.instance || 'the lost one'} and restore checkpoint ` +
      `${row.checkpoint} into this notebook's kernel.`
    : "There is no checkpoint of this kernel's variables in its notebook's folder.";
  return {
    name,
    status,
    detail,
    canRestore,
    showRestore: !restored,
    restoreLabel: restoring ? 'Restoring…' : 'Restore',
    restoreTitle
  };
}
