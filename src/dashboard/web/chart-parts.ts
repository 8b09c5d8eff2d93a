// chart.js with only the parts the pages draw registered (chart.tsx imports this module lazily, so
// it is a chunk of its own and named imports keep the rest of chart.js out of it).
import {
  BarController,
  BarElement,
  CategoryScale,
  Chart,
  Legend,
  LinearScale,
  LineController,
  LineElement,
  PointElement,
  Tooltip,
} from "chart.js";

Chart.register(
  BarController,
  BarElement,
  LineController,
  LineElement,
  PointElement,
  CategoryScale,
  LinearScale,
  Legend,
  Tooltip,
);

export { Chart };
