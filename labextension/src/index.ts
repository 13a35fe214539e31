import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { GpuCloudModel } from './model';
import { GpuCloudSidebar } from './sidebar';
import { GpuCloudStatus } from './statusbar';

const PLUGIN_ID = 'gpucloud-nb:plugin';

/** Commands whose end may have launched or deleted an instance from a notebook. */
const RUNS_CODE = /(^|:)run|execute/;

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'A GPU-cloud sidebar and a spend indicator in the status bar.',
  autoStart: true,
  optional: [ILabShell, IStatusBar, ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    labShell: ILabShell | null,
    statusBar: IStatusBar | null,
    settings: ISettingRegistry | null
  ) => {
    const model = new GpuCloudModel();
    // "Notebook on this instance": a new notebook in the file browser's folder, on the
    // instance's kernel (the kernelspec the server extension just installed).
    // The front end lists kernelspecs from a cache: refresh it so the new one is known.
    const sidebar = new GpuCloudSidebar(model, async kernelName => {
      await app.serviceManager.kernelspecs.refreshSpecs();
      return app.commands.execute('notebook:create-new', { kernelName });
    });
    app.shell.add(sidebar, 'left', { rank: 850 });

    if (statusBar) {
      const item = new GpuCloudStatus(model, () => app.shell.activateById(sidebar.id));
      statusBar.registerStatusItem(PLUGIN_ID, { item, align: 'left', rank: 10 });
    }

    // The server removed the kernelspecs of deleted instances: the Launcher and the kernel
    // menus drop their tiles now, not at the next periodic refresh (a minute or two later).
    model.gone.connect(() => void app.serviceManager.kernelspecs.refreshSpecs());

    // A cell that launched or deleted an instance: ask the server to look soon.
    app.commands.commandExecuted.connect((_, args) => {
      if (RUNS_CODE.test(args.id)) {
        void Promise.resolve(args.result)
          .catch(() => undefined)
          .then(() => model.nudge());
      }
    });

    const apply = (loaded: ISettingRegistry.ISettings) => {
      model.busyInterval = loaded.get('busyInterval').composite as number;
      model.idleInterval = loaded.get('idleInterval').composite as number;
      model.warnAfterHours = loaded.get('warnAfterHours').composite as number;
      void model.sendSettings().then(() => model.refresh());
    };
    if (settings) {
      settings
        .load(PLUGIN_ID)
        .then(loaded => {
          apply(loaded);
          loaded.changed.connect(apply);
        })
        .catch(reason => console.error('gpucloud-nb: settings not loaded', reason));
    }
    model.start();
  }
};

export default plugin;
